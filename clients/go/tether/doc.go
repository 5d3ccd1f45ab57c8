// Package tether is a Go client for the Tether API: tether.gen.go is what
// oapi-codegen (types and client, its default settings otherwise) makes of
// the API's OpenAPI 3 document, docs/openapi.yaml. `make docs` regenerates
// it; TestClientIsCurrent checks that it is current.
//
//	c, err := tether.NewClientWithResponses("http://127.0.0.1:8080",
//		tether.WithRequestEditorFn(func(_ context.Context, req *http.Request) error {
//			req.Header.Set("Authorization", "Bearer "+apiKey)
//			return nil
//		}))
//	res, err := c.CreateSandboxWithResponse(ctx, nil, tether.CreateSandboxRequest{})
//	// res.JSON202 is the sandbox; a problem is in res.ApplicationproblemJSON400 etc.
package tether

//go:generate go tool oapi-codegen -generate types,client -package tether -o tether.gen.go ../../../docs/openapi.yaml

package docs

import _ "embed" // the API documents below

// OpenAPIJSON is the OpenAPI 3.0 document (openapi.json), converted from the
// Swagger 2.0 document swag makes and completed by internal/openapi: `make
// docs` writes it. The API serves it at GET /openapi.json.
//
//go:embed openapi.json
var OpenAPIJSON []byte

// OpenAPIYAML is OpenAPIJSON as YAML (openapi.yaml), served at
// GET /openapi.yaml.
//
//go:embed openapi.yaml
var OpenAPIYAML []byte

// SwaggerJSON is the Swagger 2.0 document swag makes (swagger.json), the
// one OpenAPIJSON is converted from, served as it is at GET
// /swagger/doc.json for go-swagger users (swag's own rendering of it adds
// an empty host and schemes, which Swagger 2.0 does not allow).
//
//go:embed swagger.json
var SwaggerJSON []byte

// Command gen completes the Swagger 2.0 documents swag wrote (the
// responses every operation of a group shares) and writes the published
// OpenAPI 3.0 document (openapi.json and openapi.yaml) converted from them;
// `make docs` runs it after swag:
//
//	go run ./internal/openapi/cmd/gen -dir docs
package main

import (
	"flag"
	"fmt"
	"os"

	"github.com/tetherhq/tether/internal/openapi"
)

func main() {
	dir := flag.String("dir", "docs", "the folder swag wrote swagger.json, swagger.yaml and docs.go into")
	flag.Parse()
	if err := openapi.Generate(*dir); err != nil {
		fmt.Fprintln(os.Stderr, "openapi gen:", err)
		os.Exit(1)
	}
}

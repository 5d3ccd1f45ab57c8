// Command gen writes the published OpenAPI 3.0 document (openapi.json and
// openapi.yaml) from the Swagger 2.0 document swag makes; `make docs` runs
// it after swag:
//
//	go run ./internal/openapi/cmd/gen -in docs/swagger.json -out docs
package main

import (
	"flag"
	"fmt"
	"os"
	"path/filepath"

	"github.com/tetherhq/tether/internal/openapi"
)

func main() {
	in := flag.String("in", "docs/swagger.json", "the Swagger 2.0 document swag made")
	out := flag.String("out", "docs", "the folder to write openapi.json and openapi.yaml into")
	flag.Parse()
	if err := run(*in, *out); err != nil {
		fmt.Fprintln(os.Stderr, "openapi gen:", err)
		os.Exit(1)
	}
}

func run(in, out string) error {
	swagger, err := os.ReadFile(in)
	if err != nil {
		return err
	}
	jsonDoc, yamlDoc, err := openapi.Convert(swagger)
	if err != nil {
		return err
	}
	if err := os.WriteFile(filepath.Join(out, "openapi.json"), jsonDoc, 0o644); err != nil {
		return err
	}
	return os.WriteFile(filepath.Join(out, "openapi.yaml"), yamlDoc, 0o644)
}

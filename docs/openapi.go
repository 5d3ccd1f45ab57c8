package docs

import _ "embed" // the OpenAPI 3 documents below

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

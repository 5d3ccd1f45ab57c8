package openapi

import (
	"bytes"
	"encoding/json"
	"fmt"
	"go/format"
	"os"
	"path/filepath"
	"slices"

	"github.com/go-openapi/spec"
	"sigs.k8s.io/yaml"
)

// Generate completes the Swagger 2.0 documents swag wrote into dir
// (swagger.json, swagger.yaml and docs.go; see CompleteSwag) and writes the
// OpenAPI 3.0 document converted from the completed one (openapi.json and
// openapi.yaml) beside them. `make docs` runs it after swag.
func Generate(dir string) error {
	swagger, err := CompleteSwag(dir)
	if err != nil {
		return err
	}
	jsonDoc, yamlDoc, err := Convert(swagger)
	if err != nil {
		return err
	}
	if err := os.WriteFile(filepath.Join(dir, "openapi.json"), jsonDoc, 0o644); err != nil {
		return fmt.Errorf("openapi: write openapi.json: %w", err)
	}
	if err := os.WriteFile(filepath.Join(dir, "openapi.yaml"), yamlDoc, 0o644); err != nil {
		return fmt.Errorf("openapi: write openapi.yaml: %w", err)
	}
	return nil
}

// CompleteSwag adds the common responses (AddCommon) to the three
// documents swag wrote into dir, formatted as swag formats them, so that
// they stay one document: swagger.json (indented by four spaces),
// swagger.yaml (converted from its JSON) and the copy in docs.go that
// gin-swagger serves (only the document in its template changes). It
// returns the completed swagger.json.
func CompleteSwag(dir string) ([]byte, error) {
	jsonPath := filepath.Join(dir, "swagger.json")
	sw, err := readSwagger(jsonPath)
	if err != nil {
		return nil, err
	}
	if err := AddCommon(sw); err != nil {
		return nil, err
	}
	jsonDoc, err := json.MarshalIndent(sw, "", "    ")
	if err != nil {
		return nil, fmt.Errorf("openapi: write swagger.json: %w", err)
	}
	compact, err := json.Marshal(sw)
	if err != nil {
		return nil, fmt.Errorf("openapi: write swagger.yaml: %w", err)
	}
	yamlDoc, err := yaml.JSONToYAML(compact)
	if err != nil {
		return nil, fmt.Errorf("openapi: write swagger.yaml: %w", err)
	}
	goPath := filepath.Join(dir, "docs.go")
	src, err := os.ReadFile(goPath)
	if err != nil {
		return nil, fmt.Errorf("openapi: read docs.go: %w", err)
	}
	goDoc, err := completeDocsGo(src)
	if err != nil {
		return nil, err
	}
	for path, b := range map[string][]byte{jsonPath: jsonDoc, filepath.Join(dir, "swagger.yaml"): yamlDoc, goPath: goDoc} {
		if err := os.WriteFile(path, b, 0o644); err != nil {
			return nil, fmt.Errorf("openapi: write %s: %w", filepath.Base(path), err)
		}
	}
	return jsonDoc, nil
}

func readSwagger(path string) (*spec.Swagger, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("openapi: read %s: %w", filepath.Base(path), err)
	}
	var sw spec.Swagger
	if err := json.Unmarshal(b, &sw); err != nil {
		return nil, fmt.Errorf("openapi: read %s: %w", filepath.Base(path), err)
	}
	return &sw, nil
}

// How swag's docs.go holds the document: a raw string constant, whose
// first line also says where the schemes go and whose backticks are spelled
// as a concatenation (which gofmt spaces).
const (
	docsGoStart             = "const docTemplate = `"
	docsGoEnd               = "\n}`\n"
	docsGoSchemes           = "{\n    \"schemes\": {{ marshal .Schemes }},"
	docsGoBacktick          = "`+\"`\"+`"
	docsGoBacktickFormatted = "` + \"`\" + `"
)

// completeDocsGo adds the common responses to the document in the template
// of swag's docs.go, and writes it back as swag does.
func completeDocsGo(src []byte) ([]byte, error) {
	start := bytes.Index(src, []byte(docsGoStart))
	if start < 0 {
		return nil, fmt.Errorf("openapi: docs.go has no %q", docsGoStart)
	}
	start += len(docsGoStart)
	end := bytes.Index(src[start:], []byte(docsGoEnd))
	if end < 0 || !bytes.HasPrefix(src[start:], []byte(docsGoSchemes)) {
		return nil, fmt.Errorf("openapi: docs.go's template is not swag's")
	}
	end += start + len("\n}")
	doc := bytes.ReplaceAll(src[start:end], []byte(docsGoBacktickFormatted), []byte("`"))
	doc = bytes.ReplaceAll(doc, []byte(docsGoBacktick), []byte("`"))
	doc = append([]byte("{"), doc[len(docsGoSchemes):]...)
	var sw spec.Swagger
	if err := json.Unmarshal(doc, &sw); err != nil {
		return nil, fmt.Errorf("openapi: read docs.go's template: %w", err)
	}
	if err := AddCommon(&sw); err != nil {
		return nil, err
	}
	doc, err := json.MarshalIndent(&sw, "", "    ")
	if err != nil {
		return nil, fmt.Errorf("openapi: write docs.go: %w", err)
	}
	doc = append([]byte(docsGoSchemes), doc[1:]...)
	doc = bytes.ReplaceAll(doc, []byte("`"), []byte(docsGoBacktick))
	out := slices.Concat(src[:start], doc, src[end:])
	formatted, err := format.Source(out)
	if err != nil {
		return nil, fmt.Errorf("openapi: format docs.go: %w", err)
	}
	return formatted, nil
}

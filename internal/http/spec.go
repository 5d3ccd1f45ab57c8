package http

import (
	"net/http"

	"github.com/gin-gonic/gin"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	swaggerFiles "github.com/swaggo/files"
	ginSwagger "github.com/swaggo/gin-swagger"

	"github.com/tetherhq/tether/docs"
)

// serveDocument answers with a fixed document.
func serveDocument(contentType string, body []byte) gin.HandlerFunc {
	return func(c *gin.Context) {
		c.Data(http.StatusOK, contentType, body)
	}
}

// handleOpenAPIJSON serves the OpenAPI 3 document as JSON.
//
//	@Summary		The OpenAPI 3.0 document, as JSON
//	@Description	This API's contract, as clients are generated from (docs/openapi.json in the repository). No authentication. The Swagger 2.0 document swag makes, from which this one is converted, is at /swagger/doc.json.
//	@ID				getOpenAPIJSON
//	@Tags			docs
//	@Produce		json
//	@Success		200	{object}	object			"an OpenAPI 3.0.3 document"
//	@Router			/openapi.json [get]
func handleOpenAPIJSON() gin.HandlerFunc {
	return serveDocument("application/json", docs.OpenAPIJSON)
}

// handleOpenAPIYAML serves the OpenAPI 3 document as YAML.
//
//	@Summary		The OpenAPI 3.0 document, as YAML
//	@Description	The document of GET /openapi.json, as YAML (docs/openapi.yaml in the repository). No authentication.
//	@ID				getOpenAPIYAML
//	@Tags			docs
//	@Produce		application/yaml
//	@Success		200	{object}	object			"an OpenAPI 3.0.3 document"
//	@Router			/openapi.yaml [get]
func handleOpenAPIYAML() gin.HandlerFunc {
	return serveDocument("application/yaml", docs.OpenAPIYAML)
}

// handleMetrics serves the Prometheus metrics.
//
//	@Summary		Prometheus metrics
//	@Description	The server's metrics in the Prometheus text exposition format. No authentication. When the operator sets METRICS_ADDR, the metrics are served on that address instead, and this route is 404.
//	@ID				getMetrics
//	@Tags			health
//	@Produce		plain
//	@Success		200	{string}	string			"metrics in the Prometheus text format"
//	@Failure		404	{object}	httpapi.Problem			"NOT_FOUND: served on METRICS_ADDR instead"
//	@Router			/metrics [get]
func handleMetrics(g prometheus.Gatherer) gin.HandlerFunc {
	return gin.WrapH(promhttp.HandlerFor(g, promhttp.HandlerOpts{}))
}

// swaggerUI serves Swagger UI, showing the OpenAPI 3 document, and at
// /swagger/doc.json the committed Swagger 2.0 document byte for byte.
func swaggerUI() gin.HandlerFunc {
	ui := ginSwagger.WrapHandler(swaggerFiles.Handler, ginSwagger.URL("/openapi.json"))
	doc := serveDocument("application/json", docs.SwaggerJSON)
	return func(c *gin.Context) {
		if c.Param("any") == "/doc.json" {
			doc(c)
			return
		}
		ui(c)
	}
}

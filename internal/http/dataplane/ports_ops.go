package dataplane

import (
	"net/http"

	"github.com/gin-gonic/gin"
)

// The operations of the port routes, one per method (an operation id is
// one method's), each the same handler: handleSandboxPort for
// /v1/sandboxes/{id}/ports/{port}/{path}, previewServer.handlePreview for
// /p/{token}/{path}.

// portOpGet proxies a GET to a port in a sandbox.
//
//	@Summary		GET through a port of a sandbox
//	@Description	Proxies the request (streamed both ways, WebSocket upgrades included) to 127.0.0.1:{port} inside the ready sandbox, in its own network, never the host's: path is the app's path, the query passes on, the app sees Host 127.0.0.1:{port} and X-Forwarded-Host, -Proto, -For and -Prefix; Authorization is not passed on. The app's answer is passed on as it is, with a Content-Security-Policy sandbox directive added (its pages get an opaque origin, never Tether's), but for its cookies, kept to the app (no Domain, the Path moved under this route's prefix, none named tether_preview), and the origin-wide headers Clear-Site-Data, Strict-Transport-Security and Alt-Svc, which are dropped. Nothing listening is 502 PORT_UNREACHABLE; a sandbox that is not ready, 409 SANDBOX_STATE_CONFLICT; a provider without ports, 501 NOT_SUPPORTED. Each request, or WebSocket connection, is recorded in the sandbox's activity (kind port).
//	@ID				portProxyGet
//	@Tags			data plane
//	@Produce		json
//	@Param			id		path		string	true	"sandbox id"				example(sbx_5q3k8w1m2n4p6r7s9t0v1x2y3w)
//	@Param			port	path		int		true	"the port in the sandbox"	minimum(1)	maximum(65535)	example(8000)
//	@Param			path	path		string	true	"the app's path"			example(index.html)
//	@Success		200		"the app's answer, whatever its status and body"
//	@Failure		400		{object}	httpapi.Problem				"INVALID_REQUEST: a port that is not 1-65535, or a path with an empty (//) or dot (. ..) segment"
//	@Failure		404		{object}	httpapi.Problem				"NOT_FOUND"
//	@Failure		409		{object}	httpapi.Problem				"SANDBOX_STATE_CONFLICT"
//	@Failure		501		{object}	httpapi.Problem				"NOT_SUPPORTED"
//	@Failure		502		{object}	httpapi.Problem				"PORT_UNREACHABLE: nothing listens on the port in the sandbox, or it closed the connection without an answer"
//	@Failure		503		{object}	httpapi.Problem				"PROVIDER_UNAVAILABLE or UNAVAILABLE"
//	@Security		BearerAuth
//	@Router			/v1/sandboxes/{id}/ports/{port}/{path} [get]
func portOpGet(h gin.HandlerFunc) gin.HandlerFunc { return h }

// portOpHead proxies a HEAD to a port in a sandbox.
//
//	@Summary		HEAD through a port of a sandbox
//	@Description	Proxies the request (streamed both ways, WebSocket upgrades included) to 127.0.0.1:{port} inside the ready sandbox, in its own network, never the host's: path is the app's path, the query passes on, the app sees Host 127.0.0.1:{port} and X-Forwarded-Host, -Proto, -For and -Prefix; Authorization is not passed on. The app's answer is passed on as it is, with a Content-Security-Policy sandbox directive added (its pages get an opaque origin, never Tether's), but for its cookies, kept to the app (no Domain, the Path moved under this route's prefix, none named tether_preview), and the origin-wide headers Clear-Site-Data, Strict-Transport-Security and Alt-Svc, which are dropped. Nothing listening is 502 PORT_UNREACHABLE; a sandbox that is not ready, 409 SANDBOX_STATE_CONFLICT; a provider without ports, 501 NOT_SUPPORTED. Each request, or WebSocket connection, is recorded in the sandbox's activity (kind port).
//	@ID				portProxyHead
//	@Tags			data plane
//	@Produce		json
//	@Param			id		path		string	true	"sandbox id"				example(sbx_5q3k8w1m2n4p6r7s9t0v1x2y3w)
//	@Param			port	path		int		true	"the port in the sandbox"	minimum(1)	maximum(65535)	example(8000)
//	@Param			path	path		string	true	"the app's path"			example(index.html)
//	@Success		200		"the app's answer, whatever its status and body"
//	@Failure		400		{object}	httpapi.Problem				"INVALID_REQUEST: a port that is not 1-65535, or a path with an empty (//) or dot (. ..) segment"
//	@Failure		404		{object}	httpapi.Problem				"NOT_FOUND"
//	@Failure		409		{object}	httpapi.Problem				"SANDBOX_STATE_CONFLICT"
//	@Failure		501		{object}	httpapi.Problem				"NOT_SUPPORTED"
//	@Failure		502		{object}	httpapi.Problem				"PORT_UNREACHABLE: nothing listens on the port in the sandbox, or it closed the connection without an answer"
//	@Failure		503		{object}	httpapi.Problem				"PROVIDER_UNAVAILABLE or UNAVAILABLE"
//	@Security		BearerAuth
//	@Router			/v1/sandboxes/{id}/ports/{port}/{path} [head]
func portOpHead(h gin.HandlerFunc) gin.HandlerFunc { return h }

// portOpPost proxies a POST to a port in a sandbox.
//
//	@Summary		POST through a port of a sandbox
//	@Description	Proxies the request (streamed both ways, WebSocket upgrades included) to 127.0.0.1:{port} inside the ready sandbox, in its own network, never the host's: path is the app's path, the query passes on, the app sees Host 127.0.0.1:{port} and X-Forwarded-Host, -Proto, -For and -Prefix; Authorization is not passed on. The app's answer is passed on as it is, with a Content-Security-Policy sandbox directive added (its pages get an opaque origin, never Tether's), but for its cookies, kept to the app (no Domain, the Path moved under this route's prefix, none named tether_preview), and the origin-wide headers Clear-Site-Data, Strict-Transport-Security and Alt-Svc, which are dropped. Nothing listening is 502 PORT_UNREACHABLE; a sandbox that is not ready, 409 SANDBOX_STATE_CONFLICT; a provider without ports, 501 NOT_SUPPORTED. Each request, or WebSocket connection, is recorded in the sandbox's activity (kind port).
//	@ID				portProxyPost
//	@Tags			data plane
//	@Produce		json
//	@Param			id		path		string	true	"sandbox id"				example(sbx_5q3k8w1m2n4p6r7s9t0v1x2y3w)
//	@Param			port	path		int		true	"the port in the sandbox"	minimum(1)	maximum(65535)	example(8000)
//	@Param			path	path		string	true	"the app's path"			example(index.html)
//	@Success		200		"the app's answer, whatever its status and body"
//	@Failure		400		{object}	httpapi.Problem				"INVALID_REQUEST: a port that is not 1-65535, or a path with an empty (//) or dot (. ..) segment"
//	@Failure		404		{object}	httpapi.Problem				"NOT_FOUND"
//	@Failure		409		{object}	httpapi.Problem				"SANDBOX_STATE_CONFLICT"
//	@Failure		501		{object}	httpapi.Problem				"NOT_SUPPORTED"
//	@Failure		502		{object}	httpapi.Problem				"PORT_UNREACHABLE: nothing listens on the port in the sandbox, or it closed the connection without an answer"
//	@Failure		503		{object}	httpapi.Problem				"PROVIDER_UNAVAILABLE or UNAVAILABLE"
//	@Security		BearerAuth
//	@Router			/v1/sandboxes/{id}/ports/{port}/{path} [post]
func portOpPost(h gin.HandlerFunc) gin.HandlerFunc { return h }

// portOpPut proxies a PUT to a port in a sandbox.
//
//	@Summary		PUT through a port of a sandbox
//	@Description	Proxies the request (streamed both ways, WebSocket upgrades included) to 127.0.0.1:{port} inside the ready sandbox, in its own network, never the host's: path is the app's path, the query passes on, the app sees Host 127.0.0.1:{port} and X-Forwarded-Host, -Proto, -For and -Prefix; Authorization is not passed on. The app's answer is passed on as it is, with a Content-Security-Policy sandbox directive added (its pages get an opaque origin, never Tether's), but for its cookies, kept to the app (no Domain, the Path moved under this route's prefix, none named tether_preview), and the origin-wide headers Clear-Site-Data, Strict-Transport-Security and Alt-Svc, which are dropped. Nothing listening is 502 PORT_UNREACHABLE; a sandbox that is not ready, 409 SANDBOX_STATE_CONFLICT; a provider without ports, 501 NOT_SUPPORTED. Each request, or WebSocket connection, is recorded in the sandbox's activity (kind port).
//	@ID				portProxyPut
//	@Tags			data plane
//	@Produce		json
//	@Param			id		path		string	true	"sandbox id"				example(sbx_5q3k8w1m2n4p6r7s9t0v1x2y3w)
//	@Param			port	path		int		true	"the port in the sandbox"	minimum(1)	maximum(65535)	example(8000)
//	@Param			path	path		string	true	"the app's path"			example(index.html)
//	@Success		200		"the app's answer, whatever its status and body"
//	@Failure		400		{object}	httpapi.Problem				"INVALID_REQUEST: a port that is not 1-65535, or a path with an empty (//) or dot (. ..) segment"
//	@Failure		404		{object}	httpapi.Problem				"NOT_FOUND"
//	@Failure		409		{object}	httpapi.Problem				"SANDBOX_STATE_CONFLICT"
//	@Failure		501		{object}	httpapi.Problem				"NOT_SUPPORTED"
//	@Failure		502		{object}	httpapi.Problem				"PORT_UNREACHABLE: nothing listens on the port in the sandbox, or it closed the connection without an answer"
//	@Failure		503		{object}	httpapi.Problem				"PROVIDER_UNAVAILABLE or UNAVAILABLE"
//	@Security		BearerAuth
//	@Router			/v1/sandboxes/{id}/ports/{port}/{path} [put]
func portOpPut(h gin.HandlerFunc) gin.HandlerFunc { return h }

// portOpPatch proxies a PATCH to a port in a sandbox.
//
//	@Summary		PATCH through a port of a sandbox
//	@Description	Proxies the request (streamed both ways, WebSocket upgrades included) to 127.0.0.1:{port} inside the ready sandbox, in its own network, never the host's: path is the app's path, the query passes on, the app sees Host 127.0.0.1:{port} and X-Forwarded-Host, -Proto, -For and -Prefix; Authorization is not passed on. The app's answer is passed on as it is, with a Content-Security-Policy sandbox directive added (its pages get an opaque origin, never Tether's), but for its cookies, kept to the app (no Domain, the Path moved under this route's prefix, none named tether_preview), and the origin-wide headers Clear-Site-Data, Strict-Transport-Security and Alt-Svc, which are dropped. Nothing listening is 502 PORT_UNREACHABLE; a sandbox that is not ready, 409 SANDBOX_STATE_CONFLICT; a provider without ports, 501 NOT_SUPPORTED. Each request, or WebSocket connection, is recorded in the sandbox's activity (kind port).
//	@ID				portProxyPatch
//	@Tags			data plane
//	@Produce		json
//	@Param			id		path		string	true	"sandbox id"				example(sbx_5q3k8w1m2n4p6r7s9t0v1x2y3w)
//	@Param			port	path		int		true	"the port in the sandbox"	minimum(1)	maximum(65535)	example(8000)
//	@Param			path	path		string	true	"the app's path"			example(index.html)
//	@Success		200		"the app's answer, whatever its status and body"
//	@Failure		400		{object}	httpapi.Problem				"INVALID_REQUEST: a port that is not 1-65535, or a path with an empty (//) or dot (. ..) segment"
//	@Failure		404		{object}	httpapi.Problem				"NOT_FOUND"
//	@Failure		409		{object}	httpapi.Problem				"SANDBOX_STATE_CONFLICT"
//	@Failure		501		{object}	httpapi.Problem				"NOT_SUPPORTED"
//	@Failure		502		{object}	httpapi.Problem				"PORT_UNREACHABLE: nothing listens on the port in the sandbox, or it closed the connection without an answer"
//	@Failure		503		{object}	httpapi.Problem				"PROVIDER_UNAVAILABLE or UNAVAILABLE"
//	@Security		BearerAuth
//	@Router			/v1/sandboxes/{id}/ports/{port}/{path} [patch]
func portOpPatch(h gin.HandlerFunc) gin.HandlerFunc { return h }

// portOpDelete proxies a DELETE to a port in a sandbox.
//
//	@Summary		DELETE through a port of a sandbox
//	@Description	Proxies the request (streamed both ways, WebSocket upgrades included) to 127.0.0.1:{port} inside the ready sandbox, in its own network, never the host's: path is the app's path, the query passes on, the app sees Host 127.0.0.1:{port} and X-Forwarded-Host, -Proto, -For and -Prefix; Authorization is not passed on. The app's answer is passed on as it is, with a Content-Security-Policy sandbox directive added (its pages get an opaque origin, never Tether's), but for its cookies, kept to the app (no Domain, the Path moved under this route's prefix, none named tether_preview), and the origin-wide headers Clear-Site-Data, Strict-Transport-Security and Alt-Svc, which are dropped. Nothing listening is 502 PORT_UNREACHABLE; a sandbox that is not ready, 409 SANDBOX_STATE_CONFLICT; a provider without ports, 501 NOT_SUPPORTED. Each request, or WebSocket connection, is recorded in the sandbox's activity (kind port).
//	@ID				portProxyDelete
//	@Tags			data plane
//	@Produce		json
//	@Param			id		path		string	true	"sandbox id"				example(sbx_5q3k8w1m2n4p6r7s9t0v1x2y3w)
//	@Param			port	path		int		true	"the port in the sandbox"	minimum(1)	maximum(65535)	example(8000)
//	@Param			path	path		string	true	"the app's path"			example(index.html)
//	@Success		200		"the app's answer, whatever its status and body"
//	@Failure		400		{object}	httpapi.Problem				"INVALID_REQUEST: a port that is not 1-65535, or a path with an empty (//) or dot (. ..) segment"
//	@Failure		404		{object}	httpapi.Problem				"NOT_FOUND"
//	@Failure		409		{object}	httpapi.Problem				"SANDBOX_STATE_CONFLICT"
//	@Failure		501		{object}	httpapi.Problem				"NOT_SUPPORTED"
//	@Failure		502		{object}	httpapi.Problem				"PORT_UNREACHABLE: nothing listens on the port in the sandbox, or it closed the connection without an answer"
//	@Failure		503		{object}	httpapi.Problem				"PROVIDER_UNAVAILABLE or UNAVAILABLE"
//	@Security		BearerAuth
//	@Router			/v1/sandboxes/{id}/ports/{port}/{path} [delete]
func portOpDelete(h gin.HandlerFunc) gin.HandlerFunc { return h }

// portOpOptions proxies a OPTIONS to a port in a sandbox.
//
//	@Summary		OPTIONS through a port of a sandbox
//	@Description	Proxies the request (streamed both ways, WebSocket upgrades included) to 127.0.0.1:{port} inside the ready sandbox, in its own network, never the host's: path is the app's path, the query passes on, the app sees Host 127.0.0.1:{port} and X-Forwarded-Host, -Proto, -For and -Prefix; Authorization is not passed on. The app's answer is passed on as it is, with a Content-Security-Policy sandbox directive added (its pages get an opaque origin, never Tether's), but for its cookies, kept to the app (no Domain, the Path moved under this route's prefix, none named tether_preview), and the origin-wide headers Clear-Site-Data, Strict-Transport-Security and Alt-Svc, which are dropped. Nothing listening is 502 PORT_UNREACHABLE; a sandbox that is not ready, 409 SANDBOX_STATE_CONFLICT; a provider without ports, 501 NOT_SUPPORTED. Each request, or WebSocket connection, is recorded in the sandbox's activity (kind port).
//	@ID				portProxyOptions
//	@Tags			data plane
//	@Produce		json
//	@Param			id		path		string	true	"sandbox id"				example(sbx_5q3k8w1m2n4p6r7s9t0v1x2y3w)
//	@Param			port	path		int		true	"the port in the sandbox"	minimum(1)	maximum(65535)	example(8000)
//	@Param			path	path		string	true	"the app's path"			example(index.html)
//	@Success		200		"the app's answer, whatever its status and body"
//	@Failure		400		{object}	httpapi.Problem				"INVALID_REQUEST: a port that is not 1-65535, or a path with an empty (//) or dot (. ..) segment"
//	@Failure		404		{object}	httpapi.Problem				"NOT_FOUND"
//	@Failure		409		{object}	httpapi.Problem				"SANDBOX_STATE_CONFLICT"
//	@Failure		501		{object}	httpapi.Problem				"NOT_SUPPORTED"
//	@Failure		502		{object}	httpapi.Problem				"PORT_UNREACHABLE: nothing listens on the port in the sandbox, or it closed the connection without an answer"
//	@Failure		503		{object}	httpapi.Problem				"PROVIDER_UNAVAILABLE or UNAVAILABLE"
//	@Security		BearerAuth
//	@Router			/v1/sandboxes/{id}/ports/{port}/{path} [options]
func portOpOptions(h gin.HandlerFunc) gin.HandlerFunc { return h }

// previewOpGet serves a GET through a preview URL.
//
//	@Summary		GET through a preview URL
//	@Description	What /v1/sandboxes/{id}/ports/{port}/{path} does, without an API key: the token names the sandbox and the port. An unknown token is 404 NOT_FOUND; one that expired or was revoked, or whose sandbox ended, 410 PREVIEW_GONE; a sandbox that is not ready (paused), 409 SANDBOX_STATE_CONFLICT (a preview never starts or resumes anything). Each request, or WebSocket connection, is recorded in the sandbox's activity (kind preview).
//	@ID				previewProxyGet
//	@Tags			data plane
//	@Produce		json
//	@Param			token	path		string	true	"the preview's token"	example(tpv_Zm9vYmFy)
//	@Param			path	path		string	true	"the app's path"		example(index.html)
//	@Success		200		"the app's answer, whatever its status and body"
//	@Failure		400		{object}	httpapi.Problem			"INVALID_REQUEST: a path with an empty (//) or dot (. ..) segment"
//	@Failure		404		{object}	httpapi.Problem			"NOT_FOUND: no such preview"
//	@Failure		409		{object}	httpapi.Problem			"SANDBOX_STATE_CONFLICT"
//	@Failure		410		{object}	httpapi.Problem			"PREVIEW_GONE: expired, revoked, or the sandbox ended"
//	@Failure		429		{object}	httpapi.Problem			"QUOTA_EXCEEDED: too many unknown tokens from this address; retry after Retry-After seconds"
//	@Failure		501		{object}	httpapi.Problem			"NOT_SUPPORTED"
//	@Failure		502		{object}	httpapi.Problem			"PORT_UNREACHABLE: nothing listens on the port in the sandbox, or it closed the connection without an answer"
//	@Failure		503		{object}	httpapi.Problem			"PROVIDER_UNAVAILABLE or UNAVAILABLE"
//	@Router			/p/{token}/{path} [get]
func previewOpGet(h gin.HandlerFunc) gin.HandlerFunc { return h }

// previewOpHead serves a HEAD through a preview URL.
//
//	@Summary		HEAD through a preview URL
//	@Description	What /v1/sandboxes/{id}/ports/{port}/{path} does, without an API key: the token names the sandbox and the port. An unknown token is 404 NOT_FOUND; one that expired or was revoked, or whose sandbox ended, 410 PREVIEW_GONE; a sandbox that is not ready (paused), 409 SANDBOX_STATE_CONFLICT (a preview never starts or resumes anything). Each request, or WebSocket connection, is recorded in the sandbox's activity (kind preview).
//	@ID				previewProxyHead
//	@Tags			data plane
//	@Produce		json
//	@Param			token	path		string	true	"the preview's token"	example(tpv_Zm9vYmFy)
//	@Param			path	path		string	true	"the app's path"		example(index.html)
//	@Success		200		"the app's answer, whatever its status and body"
//	@Failure		400		{object}	httpapi.Problem			"INVALID_REQUEST: a path with an empty (//) or dot (. ..) segment"
//	@Failure		404		{object}	httpapi.Problem			"NOT_FOUND: no such preview"
//	@Failure		409		{object}	httpapi.Problem			"SANDBOX_STATE_CONFLICT"
//	@Failure		410		{object}	httpapi.Problem			"PREVIEW_GONE: expired, revoked, or the sandbox ended"
//	@Failure		429		{object}	httpapi.Problem			"QUOTA_EXCEEDED: too many unknown tokens from this address; retry after Retry-After seconds"
//	@Failure		501		{object}	httpapi.Problem			"NOT_SUPPORTED"
//	@Failure		502		{object}	httpapi.Problem			"PORT_UNREACHABLE: nothing listens on the port in the sandbox, or it closed the connection without an answer"
//	@Failure		503		{object}	httpapi.Problem			"PROVIDER_UNAVAILABLE or UNAVAILABLE"
//	@Router			/p/{token}/{path} [head]
func previewOpHead(h gin.HandlerFunc) gin.HandlerFunc { return h }

// previewOpPost serves a POST through a preview URL.
//
//	@Summary		POST through a preview URL
//	@Description	What /v1/sandboxes/{id}/ports/{port}/{path} does, without an API key: the token names the sandbox and the port. An unknown token is 404 NOT_FOUND; one that expired or was revoked, or whose sandbox ended, 410 PREVIEW_GONE; a sandbox that is not ready (paused), 409 SANDBOX_STATE_CONFLICT (a preview never starts or resumes anything). Each request, or WebSocket connection, is recorded in the sandbox's activity (kind preview).
//	@ID				previewProxyPost
//	@Tags			data plane
//	@Produce		json
//	@Param			token	path		string	true	"the preview's token"	example(tpv_Zm9vYmFy)
//	@Param			path	path		string	true	"the app's path"		example(index.html)
//	@Success		200		"the app's answer, whatever its status and body"
//	@Failure		400		{object}	httpapi.Problem			"INVALID_REQUEST: a path with an empty (//) or dot (. ..) segment"
//	@Failure		404		{object}	httpapi.Problem			"NOT_FOUND: no such preview"
//	@Failure		409		{object}	httpapi.Problem			"SANDBOX_STATE_CONFLICT"
//	@Failure		410		{object}	httpapi.Problem			"PREVIEW_GONE: expired, revoked, or the sandbox ended"
//	@Failure		429		{object}	httpapi.Problem			"QUOTA_EXCEEDED: too many unknown tokens from this address; retry after Retry-After seconds"
//	@Failure		501		{object}	httpapi.Problem			"NOT_SUPPORTED"
//	@Failure		502		{object}	httpapi.Problem			"PORT_UNREACHABLE: nothing listens on the port in the sandbox, or it closed the connection without an answer"
//	@Failure		503		{object}	httpapi.Problem			"PROVIDER_UNAVAILABLE or UNAVAILABLE"
//	@Router			/p/{token}/{path} [post]
func previewOpPost(h gin.HandlerFunc) gin.HandlerFunc { return h }

// previewOpPut serves a PUT through a preview URL.
//
//	@Summary		PUT through a preview URL
//	@Description	What /v1/sandboxes/{id}/ports/{port}/{path} does, without an API key: the token names the sandbox and the port. An unknown token is 404 NOT_FOUND; one that expired or was revoked, or whose sandbox ended, 410 PREVIEW_GONE; a sandbox that is not ready (paused), 409 SANDBOX_STATE_CONFLICT (a preview never starts or resumes anything). Each request, or WebSocket connection, is recorded in the sandbox's activity (kind preview).
//	@ID				previewProxyPut
//	@Tags			data plane
//	@Produce		json
//	@Param			token	path		string	true	"the preview's token"	example(tpv_Zm9vYmFy)
//	@Param			path	path		string	true	"the app's path"		example(index.html)
//	@Success		200		"the app's answer, whatever its status and body"
//	@Failure		400		{object}	httpapi.Problem			"INVALID_REQUEST: a path with an empty (//) or dot (. ..) segment"
//	@Failure		404		{object}	httpapi.Problem			"NOT_FOUND: no such preview"
//	@Failure		409		{object}	httpapi.Problem			"SANDBOX_STATE_CONFLICT"
//	@Failure		410		{object}	httpapi.Problem			"PREVIEW_GONE: expired, revoked, or the sandbox ended"
//	@Failure		429		{object}	httpapi.Problem			"QUOTA_EXCEEDED: too many unknown tokens from this address; retry after Retry-After seconds"
//	@Failure		501		{object}	httpapi.Problem			"NOT_SUPPORTED"
//	@Failure		502		{object}	httpapi.Problem			"PORT_UNREACHABLE: nothing listens on the port in the sandbox, or it closed the connection without an answer"
//	@Failure		503		{object}	httpapi.Problem			"PROVIDER_UNAVAILABLE or UNAVAILABLE"
//	@Router			/p/{token}/{path} [put]
func previewOpPut(h gin.HandlerFunc) gin.HandlerFunc { return h }

// previewOpPatch serves a PATCH through a preview URL.
//
//	@Summary		PATCH through a preview URL
//	@Description	What /v1/sandboxes/{id}/ports/{port}/{path} does, without an API key: the token names the sandbox and the port. An unknown token is 404 NOT_FOUND; one that expired or was revoked, or whose sandbox ended, 410 PREVIEW_GONE; a sandbox that is not ready (paused), 409 SANDBOX_STATE_CONFLICT (a preview never starts or resumes anything). Each request, or WebSocket connection, is recorded in the sandbox's activity (kind preview).
//	@ID				previewProxyPatch
//	@Tags			data plane
//	@Produce		json
//	@Param			token	path		string	true	"the preview's token"	example(tpv_Zm9vYmFy)
//	@Param			path	path		string	true	"the app's path"		example(index.html)
//	@Success		200		"the app's answer, whatever its status and body"
//	@Failure		400		{object}	httpapi.Problem			"INVALID_REQUEST: a path with an empty (//) or dot (. ..) segment"
//	@Failure		404		{object}	httpapi.Problem			"NOT_FOUND: no such preview"
//	@Failure		409		{object}	httpapi.Problem			"SANDBOX_STATE_CONFLICT"
//	@Failure		410		{object}	httpapi.Problem			"PREVIEW_GONE: expired, revoked, or the sandbox ended"
//	@Failure		429		{object}	httpapi.Problem			"QUOTA_EXCEEDED: too many unknown tokens from this address; retry after Retry-After seconds"
//	@Failure		501		{object}	httpapi.Problem			"NOT_SUPPORTED"
//	@Failure		502		{object}	httpapi.Problem			"PORT_UNREACHABLE: nothing listens on the port in the sandbox, or it closed the connection without an answer"
//	@Failure		503		{object}	httpapi.Problem			"PROVIDER_UNAVAILABLE or UNAVAILABLE"
//	@Router			/p/{token}/{path} [patch]
func previewOpPatch(h gin.HandlerFunc) gin.HandlerFunc { return h }

// previewOpDelete serves a DELETE through a preview URL.
//
//	@Summary		DELETE through a preview URL
//	@Description	What /v1/sandboxes/{id}/ports/{port}/{path} does, without an API key: the token names the sandbox and the port. An unknown token is 404 NOT_FOUND; one that expired or was revoked, or whose sandbox ended, 410 PREVIEW_GONE; a sandbox that is not ready (paused), 409 SANDBOX_STATE_CONFLICT (a preview never starts or resumes anything). Each request, or WebSocket connection, is recorded in the sandbox's activity (kind preview).
//	@ID				previewProxyDelete
//	@Tags			data plane
//	@Produce		json
//	@Param			token	path		string	true	"the preview's token"	example(tpv_Zm9vYmFy)
//	@Param			path	path		string	true	"the app's path"		example(index.html)
//	@Success		200		"the app's answer, whatever its status and body"
//	@Failure		400		{object}	httpapi.Problem			"INVALID_REQUEST: a path with an empty (//) or dot (. ..) segment"
//	@Failure		404		{object}	httpapi.Problem			"NOT_FOUND: no such preview"
//	@Failure		409		{object}	httpapi.Problem			"SANDBOX_STATE_CONFLICT"
//	@Failure		410		{object}	httpapi.Problem			"PREVIEW_GONE: expired, revoked, or the sandbox ended"
//	@Failure		429		{object}	httpapi.Problem			"QUOTA_EXCEEDED: too many unknown tokens from this address; retry after Retry-After seconds"
//	@Failure		501		{object}	httpapi.Problem			"NOT_SUPPORTED"
//	@Failure		502		{object}	httpapi.Problem			"PORT_UNREACHABLE: nothing listens on the port in the sandbox, or it closed the connection without an answer"
//	@Failure		503		{object}	httpapi.Problem			"PROVIDER_UNAVAILABLE or UNAVAILABLE"
//	@Router			/p/{token}/{path} [delete]
func previewOpDelete(h gin.HandlerFunc) gin.HandlerFunc { return h }

// previewOpOptions serves a OPTIONS through a preview URL.
//
//	@Summary		OPTIONS through a preview URL
//	@Description	What /v1/sandboxes/{id}/ports/{port}/{path} does, without an API key: the token names the sandbox and the port. An unknown token is 404 NOT_FOUND; one that expired or was revoked, or whose sandbox ended, 410 PREVIEW_GONE; a sandbox that is not ready (paused), 409 SANDBOX_STATE_CONFLICT (a preview never starts or resumes anything). Each request, or WebSocket connection, is recorded in the sandbox's activity (kind preview).
//	@ID				previewProxyOptions
//	@Tags			data plane
//	@Produce		json
//	@Param			token	path		string	true	"the preview's token"	example(tpv_Zm9vYmFy)
//	@Param			path	path		string	true	"the app's path"		example(index.html)
//	@Success		200		"the app's answer, whatever its status and body"
//	@Failure		400		{object}	httpapi.Problem			"INVALID_REQUEST: a path with an empty (//) or dot (. ..) segment"
//	@Failure		404		{object}	httpapi.Problem			"NOT_FOUND: no such preview"
//	@Failure		409		{object}	httpapi.Problem			"SANDBOX_STATE_CONFLICT"
//	@Failure		410		{object}	httpapi.Problem			"PREVIEW_GONE: expired, revoked, or the sandbox ended"
//	@Failure		429		{object}	httpapi.Problem			"QUOTA_EXCEEDED: too many unknown tokens from this address; retry after Retry-After seconds"
//	@Failure		501		{object}	httpapi.Problem			"NOT_SUPPORTED"
//	@Failure		502		{object}	httpapi.Problem			"PORT_UNREACHABLE: nothing listens on the port in the sandbox, or it closed the connection without an answer"
//	@Failure		503		{object}	httpapi.Problem			"PROVIDER_UNAVAILABLE or UNAVAILABLE"
//	@Router			/p/{token}/{path} [options]
func previewOpOptions(h gin.HandlerFunc) gin.HandlerFunc { return h }

// portOps and previewOps are the operations by method.
var (
	PortOps = map[string]func(gin.HandlerFunc) gin.HandlerFunc{
		http.MethodGet: portOpGet, http.MethodHead: portOpHead, http.MethodPost: portOpPost, http.MethodPut: portOpPut,
		http.MethodPatch: portOpPatch, http.MethodDelete: portOpDelete, http.MethodOptions: portOpOptions,
	}
	PreviewOps = map[string]func(gin.HandlerFunc) gin.HandlerFunc{
		http.MethodGet: previewOpGet, http.MethodHead: previewOpHead, http.MethodPost: previewOpPost, http.MethodPut: previewOpPut,
		http.MethodPatch: previewOpPatch, http.MethodDelete: previewOpDelete, http.MethodOptions: previewOpOptions,
	}
)

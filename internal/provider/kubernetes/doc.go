// Package kubernetes is the provider of sandboxes as Kubernetes pods,
// through client-go.
//
// Each sandbox is one pod in the configured namespace, named from the
// sandbox id ("sbx_…" becomes "sbx-…") and labelled with the sandbox id,
// its tenant, this Tether installation's id and managed-by "tether"; List
// finds the pods of this installation only, by label selector, page by
// page. A pod runs one container that waits for ever (restartPolicy
// Never), with activeDeadlineSeconds set from the sandbox's end
// (CreateSpec.EndBy), so the cluster ends it even if no Tether replica
// runs. It is hardened by default: no service account token, no service
// links, a non-root user, every capability dropped, no privilege
// escalation, the RuntimeDefault seccomp profile, optionally a read-only
// root, resource requests equal to limits; runtimeClassName, node
// selector and tolerations come from the configuration. A NetworkPolicy
// per sandbox, made before its pod, allows no ingress and the egress its
// params allow (none by default).
//
// Commands, files and archives go through pods/exec (WebSocket, falling
// back to SPDY): see exec.go and files.go. The provider is not host-bound:
// every replica reaches every pod. Watch (watch.go) reports pods that end
// or vanish behind Tether's back, so the janitor ends their sandboxes at
// once.
//
// The provider is compiled only with the build tag kubernetes (`go build
// -tags kubernetes`; `make build`, the container image and `make test`
// set it), since client-go takes most of a cold build. Without the tag
// only Registration, its settings and the defaults are built: Tether still
// documents the settings, and PROVIDERS=kubernetes fails at start with
// ErrNotBuiltIn, which says how to build a Tether that has the provider.
package kubernetes

// Package provider is Tether's provider SDK: the contract a provider
// implements, the errors it returns, and the registration that makes it one
// of Tether's providers. It depends on nothing else of Tether, so a provider
// kept outside Tether's repository implements it the same way as the ones
// inside (sim, local).
//
// # Writing a provider
//
// A provider makes and destroys the resources behind sandboxes: processes,
// containers, pods, cloud machines. Implement [Provider]:
//
//   - Create makes the resource for CreateSpec.SandboxID and returns once it
//     is ready. It must be idempotent on the sandbox id: two executors may
//     call it for one sandbox (one whose lease was taken mid-call, and the
//     new holder), and the second call returns the first one's resource and
//     makes nothing. Wrap errors worth another attempt with [Retryable]; any
//     other error fails the sandbox.
//   - Destroy removes everything held for the sandbox. It is idempotent: a
//     sandbox with nothing left, or one the provider never heard of, is
//     success. Tether retries it until it succeeds.
//   - List returns every resource the provider holds for this Tether
//     installation and nothing else, whatever state each is in: Tether's
//     janitor destroys what the registry does not know and ends sandboxes
//     whose resource is missing or [Resource].Defunct. So name or label every
//     resource with its sandbox id, and find resources by those names or
//     labels, never by what this process remembers: a Create whose caller
//     crashed must still be listed by the next process.
//   - ValidateParams checks a create request's provider-specific params
//     before anything is written: an [*Error] with [CodeInvalidRequest] for
//     params it does not accept, [CodeForbidden] for params the operator has
//     not allowed.
//   - Info describes the provider. A provider that cannot work on this host
//     reports Available false and a Reason rather than failing Tether's
//     start.
//
// Tether calls a provider from its executor (Create), its janitor (List,
// Destroy) and its data-plane routes (the optional capabilities), always
// with a context that carries cancellation and a deadline, and from many
// goroutines at once: a provider must be safe for concurrent use.
//
// The optional capabilities are separate interfaces, found by type
// assertion: [Execer], [StreamExecer], [Files], [Archives], [Pauser],
// [Snapshotter], [PortDialer], [Processes] (background processes, their
// output, stdin and signals), [PTY] (terminals for them) and
// [FileWatcher] (changes in a folder); and [HostBound] for providers
// whose resources live on the host Tether runs on. A data-plane
// call for a sandbox the provider no longer holds (its resource is gone or
// no longer runs) returns [CodeProviderUnavailable]; the janitor then marks
// the sandbox lost.
//
// Errors a client may see are [*Error] values with one of the codes of this
// package ([Errorf]); any other error is shown to clients as a generic
// internal error and logged.
//
// # Registering it
//
// A [Registration] names the provider, declares its settings (environment
// variables, each with a default and a description) and constructs it from
// them. A [Registry] holds the registrations Tether knows and builds the
// enabled providers.
//
// # Testing it
//
// The package providertest is the conformance suite every provider passes:
// idempotent create and destroy, listing after a restart, defunct
// resources, params validation, and the semantics and error codes of each
// optional capability the provider has. Call providertest.Run from a test of
// the provider's own package.
package provider

// Package controlplane is the API's control plane: the records Tether
// keeps and what changes them (sandboxes and their lifecycle, owners and
// their leases, snapshots, warm pools, API keys, webhooks, nodes,
// providers). The events that tell of them are package events.
package controlplane

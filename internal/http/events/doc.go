// Package events is the API's events feed: a sandbox's history and the
// tenant's feed as pages, the same feed as a live stream (Server-Sent
// Events), and what the janitor's reconciliation found.
package events

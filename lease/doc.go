// Package lease implements the claim protocol: batched settle-and-verify claims of due
// fires through hunt_lease rows, renewal, and fenced release. The full design comment
// follows with the implementation.
package lease

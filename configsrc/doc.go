// Package configsrc loads hunt definitions from a mounted directory or a git repository,
// validates them strictly, and reloads them without a restart.
//
// A load yields an immutable Set: the valid hunts sorted by id, a content hash over them, the
// git commit they came from (if any) and every Problem found, each with file:line:col. One bad
// file never stops the others: it is reported and skipped.
//
// Reload (Loader) is last-good per hunt: a hunt whose file became invalid keeps its previous
// definition (listed in Set.Stale with the reason), a hunt whose file was deleted is dropped,
// and when the source cannot be read at all (directory missing, git remote unreachable) or
// suddenly holds no hunt files (an empty mount) the whole previous set is kept. So an author's typo never stops a running detection, and an
// outage of the gitops repository never tombstones every hunt.
//
// Consistency of a directory read: a Kubernetes ConfigMap volume is read through its resolved
// "..data" target, which the kubelet swaps atomically, so a snapshot is always whole. Any other
// directory (git-sync, hostPath, a developer's checkout) is read file by file; a file is trusted
// only once it has not changed for Options.Settle, or reads the same on two consecutive polls,
// so a half-written file is never loaded as valid. A git source reads blobs straight from the
// fetched commit's tree, which is atomic by construction.
//
// Queries are checked offline by a small lexer (one read-only SELECT that uses the window
// parameters, no table functions that reach off the server, no SETTINGS that lift limits);
// CheckWithServer additionally asks ClickHouse's own parser (EXPLAIN AST), the authority.
package configsrc

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
// A hunt file is untrusted code, allowed only what is listed. Queries are checked offline by a
// linear lexer (one read-only SELECT with balanced brackets that uses the window parameters;
// every function, table function, dictionary and SETTINGS name it sees on an allowlist
// (allowlist.go, functions.go) widened by a Policy; no system tables or hunt-runner's own
// database); CheckWithServer has ClickHouse's own parser, the authority, parse the exact bytes
// the runner sends (FindingsQuery) and walks its tree under the same Policy. ResolveWithServer
// looks the tree's names up in the catalogue; nothing that checks a hunt evaluates any of it.
// Free text a hunt adds to every finding (labels, description) is capped in bytes at decode. A Loader built WithServerCheck
// holds back any hunt the server refuses, like an invalid file. Symlinked files must resolve
// inside the hunts directory, and no message quotes a file's content.
//
// Exceptions (exceptions.go) are part of a hunt: its exceptions: items and the shared lists its
// exceptions_from: names (NAME.exceptions.yaml files, read with the hunt files and resolved when
// the set is built). A where: expression is held to the same checks as the query, offline and
// in CheckWithServer; ExceptionsQuery is the statement of a fire with live exceptions.
package configsrc

package chlocal

import (
	"regexp"
)

var (
	// Statements that may carry ON CLUSTER or an engine clause.
	ddlRe = regexp.MustCompile(`(?is)^\s*(?:CREATE|ALTER|DROP|RENAME|TRUNCATE|ATTACH|DETACH|OPTIMIZE|EXCHANGE|GRANT|REVOKE)\b`)
	// ON CLUSTER name | 'name' | "name" | `name`, macros such as '{cluster}' included.
	onClusterRe = regexp.MustCompile("(?is)\\s+ON\\s+CLUSTER\\s+(?:'[^']*'|\"[^\"]*\"|`[^`]*`|[A-Za-z0-9_{}.-]+)")
	// Replicated*MergeTree('zk path', 'replica'[, engine args]).
	replicatedArgsRe = regexp.MustCompile(`(?is)\bReplicated(\w*MergeTree)\s*\(\s*'(?:[^'\\]|\\.)*'\s*,\s*'(?:[^'\\]|\\.)*'\s*,?\s*`)
	// Replicated*MergeTree with no arguments (inside a Replicated database).
	replicatedBareRe = regexp.MustCompile(`(?is)\bReplicated(\w*MergeTree)\b`)
	// ENGINE = Replicated('zk path', 'shard', 'replica') of a database.
	replicatedDatabaseRe = regexp.MustCompile(`(?is)\bENGINE\s*=\s*Replicated\b\s*(?:\([^)]*\))?`)
	// DROP/DETACH … SYNC.
	dropSyncRe = regexp.MustCompile(`(?is)^(\s*(?:DROP|DETACH)\b.*?)\s+SYNC\s*;?\s*$`)
)

// stripDropSync removes SYNC from DROP and DETACH statements: in chDB
// 26.5, DROP TABLE … SYNC (and DROP DATABASE … SYNC of a database holding a
// table) never returns, which would block the shared session for good.
// Without SYNC the drop takes effect at once for queries; only the removal
// of the data files is deferred.
func stripDropSync(sql string) string {
	return dropSyncRe.ReplaceAllString(sql, "$1")
}

// rewriteReplicated turns cluster DDL into its single-node form, because
// chDB (clickhouse-local) cannot replicate: ON CLUSTER is dropped,
// Replicated*MergeTree('path', 'replica', args) becomes *MergeTree(args),
// and a Replicated database becomes Atomic. Other statements are returned
// unchanged.
func rewriteReplicated(sql string) string {
	if !ddlRe.MatchString(sql) {
		return sql
	}
	sql = onClusterRe.ReplaceAllString(sql, "")
	sql = replicatedDatabaseRe.ReplaceAllString(sql, "ENGINE = Atomic")
	sql = replicatedArgsRe.ReplaceAllString(sql, "$1(")
	sql = replicatedBareRe.ReplaceAllString(sql, "$1")
	return sql
}

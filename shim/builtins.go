package shim

import (
	"github.com/hunt-runner/hunt-runner/store"
)

// builtins are the queries whose SQL other packages own, so that the shim never carries a copy.
var builtins = map[string]builtinFunc{
	// backlog_view reads the view `hunt-runner schema` creates: the only object the scaler
	// identity (`hunt-runner provision --role scaler`) may read. Its body is store.BacklogViewSelect, i.e. store's due SQL,
	// capped.
	"backlog_view": store.BacklogValueSQL,
	// due_count runs store's due SQL directly (needs SELECT on the coordination
	// tables): for development, tests, and servers where the view is not provisioned yet.
	"due_count": func(db string) string { return store.DueCountSQL(db, "now()") },
}

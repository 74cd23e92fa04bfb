package shim

import (
	"fmt"

	"github.com/hunt-runner/hunt-runner/provision"
	"github.com/hunt-runner/hunt-runner/store"
	"github.com/hunt-runner/hunt-runner/store/schema"
)

// builtins are the queries whose SQL other packages own, so that the shim never carries a copy.
var builtins = map[string]builtinFunc{
	// backlog_view reads the view `hunt-runner schema` creates: the only object the scaler
	// identity (`hunt-runner provision --role scaler`) may read. Its body is provision.BacklogViewSelect, i.e. store's due SQL,
	// capped.
	"backlog_view": func(db string) string {
		return fmt.Sprintf("SELECT value FROM %s.%s", schema.QuoteIdent(db), schema.QuoteIdent(provision.BacklogView))
	},
	// due_count runs store's due SQL directly (needs SELECT on the coordination
	// tables): for development, tests, and servers where the view is not provisioned yet.
	"due_count": func(db string) string { return store.DueCountSQL(db, "now()") },
}

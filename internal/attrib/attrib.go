// Package attrib names every statement hunt-runner sends, so that the server's
// system.query_log can be grouped by hunt, fire, run and kind, and reads that log back:
// Leaderboard (`hunt-runner cost`) and RunCosts (`status HUNT`).
//
// A statement carries a JSON log_comment (Comment) and, for a hunt's own statements, a
// query_id made by QueryID. The comment is built with encoding/json, never by pasting text:
// hunt ids and runner ids are untrusted, and a quote in one must not change what the other
// keys say. Nothing secret goes in: ids, a fire time, a definition digest and a kind.
// docs/operations.md ("Attribution") documents the schema and the query_id prefix.
package attrib

import (
	"encoding/json"
	"os"
	"time"

	"github.com/google/uuid"
)

// App is the "app" key of every comment: what `cost` selects on.
const App = "hunt-runner"

// Kind says why a statement was sent.
type Kind string

// The kinds. Live, Backfill, Preview and Test are a hunt's own SELECT (and, for live fires and
// backfill chunks, the insert of its findings); Estimate is `cost --estimate`'s EXPLAINs;
// Coordination is everything else (claims, commits, snapshots, schedule, notify).
const (
	Live         Kind = "live"
	Backfill     Kind = "backfill"
	Preview      Kind = "preview"
	Test         Kind = "test"
	Estimate     Kind = "estimate"
	Coordination Kind = "coordination"
)

// Comment is one statement's log_comment. Empty fields are left out of the JSON, so a
// coordination statement says only app, kind and runner_id.
type Comment struct {
	HuntID string
	Fire   time.Time // the fire the statement belongs to; encoded UTC, RFC 3339
	RunID  uuid.UUID
	// Revision is the hunt definition's content digest (configsrc.Hunt.Hash).
	Revision string
	Kind     Kind
	RunnerID string
	HuntSet  string
}

// String is the comment as the log_comment setting's value: one JSON object.
func (c Comment) String() string {
	type wire struct {
		App      string `json:"app"`
		HuntID   string `json:"hunt_id,omitempty"`
		Fire     string `json:"fire,omitempty"`
		RunID    string `json:"run_id,omitempty"`
		Revision string `json:"revision,omitempty"`
		Kind     Kind   `json:"kind"`
		RunnerID string `json:"runner_id,omitempty"`
		HuntSet  string `json:"hunt_set,omitempty"`
	}
	w := wire{App: App, HuntID: c.HuntID, Revision: c.Revision, Kind: c.Kind, RunnerID: c.RunnerID, HuntSet: c.HuntSet}
	if !c.Fire.IsZero() {
		w.Fire = c.Fire.UTC().Format(time.RFC3339)
	}
	if c.RunID != uuid.Nil {
		w.RunID = c.RunID.String()
	}
	b, err := json.Marshal(w)
	if err != nil {
		// Strings and a kind cannot fail to encode; keep the statement attributable anyway.
		return `{"app":"hunt-runner"}`
	}
	return string(b)
}

// QueryIDPrefix starts the query_id of every statement of a run.
const QueryIDPrefix = "hunt-runner:"

// QueryID is the query_id of one statement of run: "hunt-runner:<run_id>" for the hunt's
// SELECT, "hunt-runner:<run_id>:<step>" for the run's other statements (step names the
// statement and its attempt, e.g. "findings-2"). A server refuses a second statement while
// one with the same query_id still runs (QUERY_WITH_SAME_ID_IS_ALREADY_RUNNING), so every
// statement a run sends gets its own.
func QueryID(run uuid.UUID, step string) string {
	id := QueryIDPrefix + run.String()
	if step != "" {
		id += ":" + step
	}
	return id
}

// CoordinationComment is the log_comment of the coordination connection of runner (the --owner of
// `run`, the host name of a CLI command): set once on the connection (chstore.Options.LogComment),
// so every claim, commit and read carries it; a hunt's statements override it with their own.
func CoordinationComment(runner string) string {
	return Comment{Kind: Coordination, RunnerID: runner}.String()
}

// Host is the runner id of a command that is not a runner (preview, test, cost, status):
// the host name, or "cli" when it cannot be told.
func Host() string {
	if h, err := os.Hostname(); err == nil && h != "" {
		return h
	}
	return "cli"
}

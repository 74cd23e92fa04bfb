package attrib

import (
	"context"
	"errors"
	"fmt"
	"regexp"
	"strings"

	"github.com/ClickHouse/clickhouse-go/v2"
	"github.com/ClickHouse/clickhouse-go/v2/lib/driver"
)

// WorkloadSetting is the query setting by which the server schedules a statement into a
// workload created with CREATE WORKLOAD (ClickHouse 24.10+).
const WorkloadSetting = "workload"

// Named defaults of the workload classes: empty sends no workload setting, so a server on
// which nobody created workloads sees exactly the statements it saw before classes existed.
const (
	WorkloadLiveDefault     = ""
	WorkloadBackfillDefault = ""
	WorkloadPreviewDefault  = ""
)

// The names the suggested hierarchy (WorkloadHierarchy) creates.
const (
	SuggestedRoot     = "all"
	SuggestedLive     = "live"
	SuggestedBackfill = "backfill"
	SuggestedPreview  = "preview"
)

// Workloads are the workload classes of a hunt's own statements, by kind: live fires, backfill
// chunks, and previews (which `test` shares); empty: that class sends no workload setting.
type Workloads struct {
	Live, Backfill, Preview string
}

// For is the workload of a statement of kind k; "" for coordination and estimates, which
// are not a hunt's reads of source data.
func (w Workloads) For(k Kind) string {
	switch k {
	case Live:
		return w.Live
	case Backfill:
		return w.Backfill
	case Preview, Test:
		return w.Preview
	}
	return ""
}

// Apply sets the workload of kind k in s, when that class is set.
func (w Workloads) Apply(s clickhouse.Settings, k Kind) {
	if name := w.For(k); name != "" {
		s[WorkloadSetting] = name
	}
}

// workloadName is what a class may be called: a plain identifier, so the CREATE WORKLOAD a
// refusal suggests can be pasted as it is.
var workloadName = regexp.MustCompile(`^[A-Za-z_][A-Za-z0-9_]{0,63}$`)

// WorkloadClass is one class to check: the flag that set it and its name.
type WorkloadClass struct {
	Flag, Name string
	// Priority is the suggested priority in CREATE WORKLOAD (lower runs first).
	Priority int
}

// Classes lists the set classes of w with the flags of `run` (or, for Preview alone, of the
// CLI commands), in the order the suggested hierarchy gives them priorities.
func (w Workloads) Classes() []WorkloadClass {
	var out []WorkloadClass
	for _, c := range []WorkloadClass{{"--workload-live", w.Live, 0}, {"--workload-backfill", w.Backfill, 1}, {"--workload-preview", w.Preview, 2}} {
		if c.Name != "" {
			out = append(out, c)
		}
	}
	return out
}

// ErrNoWorkloads is wrapped when the server has no system.workloads: it predates workload
// scheduling, so a class cannot be honoured.
var ErrNoWorkloads = errors.New("the server has no system.workloads (workload classes need ClickHouse 24.10 or later)")

// CheckWorkloads refuses a class the server does not know. The server accepts any value of
// the workload setting without complaint, so a typo would silently schedule a hunt in no
// class at all: the check is what makes a class mean something. It reads system.workloads
// (server-wide, not per database) once.
func CheckWorkloads(ctx context.Context, conn driver.Conn, w Workloads) error {
	classes := w.Classes()
	if len(classes) == 0 {
		return nil
	}
	for _, c := range classes {
		if !workloadName.MatchString(c.Name) {
			return fmt.Errorf("%s %q: a workload name is letters, digits and '_', starting with a letter or '_' (at most 64)", c.Flag, c.Name)
		}
	}
	rows, err := conn.Query(ctx, "SELECT name, parent FROM system.workloads")
	if err != nil {
		var ex *clickhouse.Exception
		if errors.As(err, &ex) && ex.Code == codeUnknownTable {
			return fmt.Errorf("%s %s: %w; unset the flag to send no workload", classes[0].Flag, classes[0].Name, ErrNoWorkloads)
		}
		return fmt.Errorf("%s: read system.workloads: %w (the identity needs SELECT on system.workloads: provision --role runner grants it)",
			classes[0].Flag, err)
	}
	defer rows.Close()
	known := map[string]string{}
	for rows.Next() {
		var name, parent string
		if err := rows.Scan(&name, &parent); err != nil {
			return fmt.Errorf("check workloads: %w", err)
		}
		known[name] = parent
	}
	if err := rows.Err(); err != nil {
		return fmt.Errorf("check workloads: %w", err)
	}
	var missing []string
	for _, c := range classes {
		if _, ok := known[c.Name]; !ok {
			missing = append(missing, fmt.Sprintf("%s %q", c.Flag, c.Name))
		}
	}
	if len(missing) == 0 {
		return nil
	}
	root := SuggestedRoot
	for name, parent := range known {
		if parent == "" {
			root = name // a server has one root workload; new classes go under it
		}
	}
	var create []string
	if _, ok := known[root]; !ok {
		create = append(create, "CREATE WORKLOAD "+root+";")
	}
	for _, c := range classes {
		if _, ok := known[c.Name]; !ok {
			create = append(create, fmt.Sprintf("CREATE WORKLOAD %s IN %s SETTINGS priority = %d;", c.Name, root, c.Priority))
		}
	}
	return fmt.Errorf("%s: no such workload on the server; create it (as an administrator) with: %s "+
		"(`hunt-runner provision --workloads` prints the suggested hierarchy), or unset the flag",
		strings.Join(missing, ", "), strings.Join(create, " "))
}

// WorkloadHierarchy is the suggested hierarchy: a root with the three classes under it,
// live first. The statements are idempotent (IF NOT EXISTS), so creating it twice is harmless.
// It declares no resource: with no CREATE RESOURCE, classes only label statements; an
// operator adds CPU or IO resources (and max_concurrent_threads on the root) to have the
// server schedule by them.
func WorkloadHierarchy() []string {
	return []string{
		"CREATE WORKLOAD IF NOT EXISTS " + SuggestedRoot,
		fmt.Sprintf("CREATE WORKLOAD IF NOT EXISTS %s IN %s SETTINGS priority = 0", SuggestedLive, SuggestedRoot),
		fmt.Sprintf("CREATE WORKLOAD IF NOT EXISTS %s IN %s SETTINGS priority = 1", SuggestedBackfill, SuggestedRoot),
		fmt.Sprintf("CREATE WORKLOAD IF NOT EXISTS %s IN %s SETTINGS priority = 2", SuggestedPreview, SuggestedRoot),
	}
}

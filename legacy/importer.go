package legacy

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/ClickHouse/clickhouse-go/v2/lib/driver"
	"github.com/google/uuid"

	"github.com/hunt-runner/hunt-runner/chstore"
	"github.com/hunt-runner/hunt-runner/hunt"
	"github.com/hunt-runner/hunt-runner/schedule"
	"github.com/hunt-runner/hunt-runner/status"
	"github.com/hunt-runner/hunt-runner/store"
	"github.com/hunt-runner/hunt-runner/store/schema"
)

// DefaultOwner is the run_owner of imported rows when Options.Owner is empty.
const DefaultOwner = "import-legacy"

// ErrSchema means a database lacks what the import reads or writes (store.ErrImportSchema).
var ErrSchema = store.ErrImportSchema

// ErrLive means hunt-runner runners are live in the database (a heartbeat within
// status.LiveWithin): Import refuses to write unless Options.Force. An imported row moves a
// hunt's watermark under a runner that may hold its lease: that run's commit is then fenced and
// its work lost, and a watermark at or past the lease's fire spends the lease, so another runner
// claims the next fire while the first still runs.
var ErrLive = errors.New("hunt-runner runners are live")

// maxDateTime is the last second a DateTime column (hunt_watermark.watermark) can hold.
const maxDateTime = 1<<32 - 1

// Options configure Import.
type Options struct {
	From     string // database of the earlier runner's hunt_watermark (and hunt_state); required
	Database string // hunt-runner's coordination database; default hunt_runner
	DryRun   bool   // plan only: read, write nothing
	// Force writes even while runners are live (ErrLive), for an operator who knows that
	// none of them runs the imported hunts.
	Force bool
	Owner string // run_owner of the imported rows; default DefaultOwner
	// Broken lists files of the hunt source that did not load (relative paths), so an earlier
	// hunt missing from the set can be traced to its file.
	Broken []string
}

// Action is what Import does (or, dry, would do) with one hunt.
type Action string

// Actions, in the order a plan lists them.
const (
	ActionImport    Action = "import"    // the earlier watermark is written
	ActionDone      Action = "done"      // an earlier import already wrote it: nothing to do
	ActionAhead     Action = "ahead"     // hunt-runner's watermark is at or past it: left alone
	ActionOvertaken Action = "overtaken" // a newer watermark landed while importing: left alone
	ActionFresh     Action = "fresh"     // the earlier runner has no watermark for the hunt
	ActionNotLoaded Action = "skip"      // in the earlier runner, not in the loaded hunts
	ActionRefused   Action = "refused"   // the earlier value cannot be imported
)

// State is the earlier runner's hunt_state of one hunt.
type State struct {
	OverrunCount  uint64
	TooAggressive bool
}

// Item is the plan for one hunt.
type Item struct {
	HuntID   string
	File     string
	LegacyID string // the earlier runner's id (the file name), when the hunt's id differs
	Enabled  bool
	Action   Action
	Reason   string // for refused and skipped hunts

	Legacy    int64 // the earlier runner's watermark (epoch seconds)
	Watermark int64 // hunt-runner's watermark that continues it: Legacy + the hunt's delay

	Current    int64 // hunt-runner's newest watermark before the import
	HasCurrent bool

	// The first run after the import, as of the server clock the plan was made at: it covers
	// [FirstStart, FirstEnd) in schedule seconds, minus [GapStart, GapEnd) when that is
	// longer than max_catchup. OffGrid: Watermark is not a fire of the hunt's schedule.
	FirstStart, FirstEnd int64
	GapStart, GapEnd     int64
	OffGrid              bool

	State        *State // the earlier runner's state, if it has one for the hunt
	StateCarried bool   // a hunt_state row was (dry: would be) written
}

// Result is a whole import (or its plan).
type Result struct {
	Now      time.Time // server clock
	From     string
	Database string
	DryRun   bool
	HasState bool // the earlier database has hunt_state
	// Live lists the runners live in Database when the plan was read (status.LiveWithin); a
	// dry run reports them, an import refuses them unless forced.
	Live  []status.Runner
	Items []Item
}

// Count returns how many items have action a.
func (r Result) Count(a Action) int {
	n := 0
	for _, it := range r.Items {
		if it.Action == a {
			n++
		}
	}
	return n
}

// Changed reports whether the import wrote (dry: would write) anything.
func (r Result) Changed() bool {
	for _, it := range r.Items {
		if it.Action == ActionImport || it.StateCarried {
			return true
		}
	}
	return false
}

type legacyRow struct {
	watermark int64
	state     *State
}

type currentRow struct {
	// The newest lease (hunt_lease), when it is live and not spent: a runner is running the
	// hunt's fire leaseFire, and an imported watermark would move beneath it.
	leaseOwner          string
	leaseFire, leaseEnd int64 // leaseEnd in milliseconds
	watermarked         bool  // max is a watermark (the hunt may have only a lease or a state)
	max                 int64
	imported            []int64
	overruns            uint64
	tooAggr             bool
	hasState            bool
}

// Import carries the earlier runner's watermarks (and hunt_state) in opts.From over to
// hunt-runner's tables for every hunt of hunts. It fails only when a database cannot be read
// or written as a whole; per-hunt outcomes are in the result.
func Import(ctx context.Context, conn driver.Conn, hunts []hunt.Hunt, opts Options) (Result, error) {
	if opts.Database == "" {
		opts.Database = chstore.DefaultDatabase
	}
	if opts.Owner == "" {
		opts.Owner = DefaultOwner
	}
	res := Result{From: opts.From, Database: opts.Database, DryRun: opts.DryRun}
	if opts.From == "" {
		return res, errors.New("import-legacy: no database of the earlier runner given")
	}
	if opts.From == opts.Database {
		return res, fmt.Errorf("import-legacy: the earlier runner's database and hunt-runner's are both %q; both keep a table named %s, so they must be different databases", opts.From, schema.TableWatermark)
	}
	st := store.New(conn, opts.Database)
	hasState, err := checkSchema(ctx, st, opts)
	if err != nil {
		return res, err
	}
	res.HasState = hasState
	if res.Now, err = st.ServerClock(ctx); err != nil {
		return res, fmt.Errorf("import-legacy: read the server clock: %w", err)
	}
	if res.Live, err = status.LiveRunners(ctx, st, status.LiveWithin); err != nil {
		return res, fmt.Errorf("import-legacy: %w", err)
	}
	if len(res.Live) > 0 && !opts.DryRun && !opts.Force {
		return res, liveError(opts.Database, res.Live)
	}
	old, err := readLegacy(ctx, st, opts.From, hasState)
	if err != nil {
		return res, err
	}
	ids := make([]string, 0, len(hunts))
	for _, h := range hunts {
		ids = append(ids, h.ID)
	}
	cur, err := readCurrent(ctx, st, ids)
	if err != nil {
		return res, err
	}
	res.Items = plan(hunts, old, cur, res.Now.Unix(), opts.Broken)
	if opts.DryRun {
		return res, nil
	}
	if err := apply(ctx, st, opts, res.Items); err != nil {
		return res, err
	}
	return res, nil
}

// checkSchema checks that hunt-runner's schema can record an import and that the earlier
// runner's hunt_watermark is there; it reports whether the earlier hunt_state is.
func checkSchema(ctx context.Context, st *store.Store, opts Options) (hasState bool, err error) {
	hasState, err = st.CheckImportSchema(ctx, opts.From)
	if err != nil && !errors.Is(err, ErrSchema) {
		return false, fmt.Errorf("import-legacy: %w", err)
	}
	return hasState, err
}

// readLegacy reads the earlier runner's newest watermark (and state) per hunt.
func readLegacy(ctx context.Context, st *store.Store, from string, hasState bool) (map[string]*legacyRow, error) {
	wms, err := st.LegacyWatermarks(ctx, from)
	if err != nil {
		return nil, fmt.Errorf("import-legacy: %w", err)
	}
	out := make(map[string]*legacyRow, len(wms))
	for id, wm := range wms {
		out[id] = &legacyRow{watermark: wm}
	}
	if !hasState {
		return out, nil
	}
	states, err := st.LegacyStates(ctx, from)
	if err != nil {
		return nil, fmt.Errorf("import-legacy: %w", err)
	}
	for id, ls := range states {
		// A state without a watermark is a hunt that never completed a fire: nothing to
		// continue, and its counters alone say nothing the new runner needs.
		if r, ok := out[id]; ok {
			r.state = &State{OverrunCount: ls.OverrunCount, TooAggressive: ls.TooAggressive}
		}
	}
	return out, nil
}

// readCurrent reads hunt-runner's progress of ids.
func readCurrent(ctx context.Context, st *store.Store, ids []string) (map[string]currentRow, error) {
	ps, err := st.ImportProgress(ctx, ids)
	if err != nil {
		return nil, fmt.Errorf("import-legacy: %w", err)
	}
	out := make(map[string]currentRow, len(ps))
	for id, p := range ps {
		r := currentRow{watermarked: p.HasWatermark, max: p.Watermark, imported: p.Imported,
			overruns: p.OverrunCount, tooAggr: p.TooAggressive, hasState: p.HasState}
		if p.HasLiveLease && p.LeaseFire > r.max { // a lease whose fire is committed is spent
			r.leaseOwner, r.leaseFire, r.leaseEnd = p.LeaseOwner, p.LeaseFire, p.LeaseUntilMs
		}
		out[id] = r
	}
	return out, nil
}

// plan decides every hunt's action from what was read; now is the server clock.
func plan(hunts []hunt.Hunt, old map[string]*legacyRow, cur map[string]currentRow, now int64, broken []string) []Item {
	var items []Item
	used := map[string]bool{}
	for _, h := range hunts {
		it := Item{HuntID: h.ID, File: h.File, Enabled: h.Enabled}
		c := cur[h.ID]
		hasCur := c.watermarked
		it.Current, it.HasCurrent = c.max, hasCur
		lid := h.ID
		if _, ok := old[lid]; !ok {
			// The earlier runner named a hunt by its file (it ignored id:), and read only the
			// top directory; a file that now sets id: keeps its progress under the file name.
			if stem := fileStem(h.File); stem != "" && stem != h.ID && !strings.Contains(h.File, "/") {
				if _, ok := old[stem]; ok {
					lid, it.LegacyID = stem, stem
				}
			}
		}
		o, ok := old[lid]
		if !ok {
			it.Action = ActionFresh
			items = append(items, it)
			continue
		}
		used[lid] = true
		it.Legacy, it.State = o.watermark, o.state
		it.Watermark = o.watermark + h.DelaySeconds()
		switch {
		case h.Interval <= 0:
			it.Action, it.Reason = ActionRefused, "the hunt has no schedule"
		case o.watermark <= 0:
			it.Action, it.Reason = ActionRefused, fmt.Sprintf("the earlier watermark %d is not a time; the hunt starts afresh", o.watermark)
		case it.Watermark > maxDateTime:
			it.Action, it.Reason = ActionRefused, fmt.Sprintf("the earlier watermark %d is beyond 2106, the last second hunt_watermark can hold", o.watermark)
		case slices.Contains(c.imported, it.Watermark) && c.max == it.Watermark:
			it.Action = ActionDone
		case hasCur && c.max >= it.Watermark:
			it.Action = ActionAhead
		case c.leaseEnd > 0:
			// Even under Force: a runner without a heartbeat (an earlier release) still shows here.
			it.Action, it.Reason = ActionRefused, fmt.Sprintf("runner %s holds its live lease (fire %s, until %s): "+
				"an import now would move the watermark beneath that run; import again once it is free",
				c.leaseOwner, utc(c.leaseFire), time.UnixMilli(c.leaseEnd).UTC().Format(time.RFC3339))
		default:
			it.Action = ActionImport
		}
		if it.Action == ActionImport || it.Action == ActionDone {
			it.firstRun(&h, now)
			it.StateCarried = o.state != nil && (o.state.OverrunCount > c.overruns || (o.state.TooAggressive && !c.tooAggr))
		}
		items = append(items, it)
	}
	var rest []string
	for id := range old {
		if !used[id] {
			rest = append(rest, id)
		}
	}
	slices.Sort(rest)
	for _, id := range rest {
		it := Item{HuntID: id, Action: ActionNotLoaded, Legacy: old[id].watermark, State: old[id].state,
			Reason: "not among the loaded hunts; nothing imported"}
		for _, f := range broken {
			if !strings.Contains(f, "/") && fileStem(f) == id {
				it.Reason = fmt.Sprintf("its file %s did not load (see `hunt-runner validate`); fix it and import again", f)
			}
		}
		items = append(items, it)
	}
	return items
}

// firstRun fills in the first run after the import: the runner owes the newest fire after
// the watermark, so an off-grid watermark makes a first window that starts there and ends at
// the next fire.
func (it *Item) firstRun(h *hunt.Hunt, now int64) {
	iv, off := h.IntervalSeconds(), h.OffsetSeconds()
	fire := max(schedule.LatestFire(now, iv, off), schedule.NextFire(it.Watermark, iv, off))
	s := schedule.RunSpan(it.Watermark, true, fire, iv, h.MaxCatchupSeconds())
	it.FirstStart, it.FirstEnd = it.Watermark, s.End
	it.GapStart, it.GapEnd = s.GapStart, s.GapEnd
	it.OffGrid = schedule.LatestFire(it.Watermark, iv, off) != it.Watermark
}

func fileStem(file string) string {
	base := file[strings.LastIndex(file, "/")+1:]
	for _, ext := range []string{".yaml", ".yml"} {
		if s, ok := strings.CutSuffix(base, ext); ok {
			return s
		}
	}
	return ""
}

// runID is the same for the same import of a hunt, so a retried insert is the same row (and
// its deduplication token the same block).
func runID(from, hunt string, wm int64) uuid.UUID {
	return uuid.NewSHA1(uuid.NameSpaceURL, fmt.Appendf(nil, "hunt-runner:import-legacy:%s:%s:%d", from, hunt, wm))
}

// apply writes the plan's imports, then the states they carry, many hunts to a statement
// (store.ImportBatchDefault). Every write is conditional on the server and read back, so an
// import stopped part way (or a statement whose answer was lost) is finished by running it
// again: what landed plans as done.
func apply(ctx context.Context, st *store.Store, opts Options, items []Item) error {
	var rows []store.ImportRow
	for _, it := range items {
		if it.Action == ActionImport {
			rows = append(rows, store.ImportRow{HuntID: it.HuntID, Watermark: it.Watermark, Run: runID(opts.From, it.HuntID, it.Watermark)})
		}
	}
	// Conditional on the server: a runner that committed a watermark at or past the imported
	// one since the plan was read keeps it, and the import is reported as overtaken instead
	// of moving the hunt back.
	landed, err := st.Import(ctx, rows, opts.Owner+" from "+opts.From)
	if err != nil {
		return fmt.Errorf("import-legacy: %w", err)
	}
	var raises []store.Overruns
	for i := range items {
		it := &items[i]
		if it.Action == ActionImport && !landed[it.HuntID] {
			it.Action, it.StateCarried = ActionOvertaken, false
		}
		if it.StateCarried && it.State != nil {
			raises = append(raises, store.Overruns{HuntID: it.HuntID, Count: it.State.OverrunCount, TooAggressive: it.State.TooAggressive})
		}
	}
	if err := st.RaiseOverruns(ctx, raises); err != nil {
		return fmt.Errorf("import-legacy: %w", err)
	}
	return nil
}

// liveError names the live runners and the two ways on.
func liveError(database string, live []status.Runner) error {
	owners := make([]string, 0, len(live))
	for _, r := range live {
		owners = append(owners, fmt.Sprintf("%s (last tick %s)", r.Owner, r.LastSeen))
	}
	return fmt.Errorf("%w: %d runner(s) ticked in %s within the last %v: %s. An import under a live runner can move a "+
		"watermark beneath a lease it holds. Stop them (scale hunt-runner to 0, and its KEDA ScaledObject), wait until "+
		"`hunt-runner status` lists no runner, and import again; or pass --force if none of them runs these hunts", ErrLive, len(live), database, status.LiveWithin, strings.Join(owners, ", "))
}

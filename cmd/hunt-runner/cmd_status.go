package main

import (
	"encoding/json"
	"fmt"
	"io"
	"sort"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/urfave/cli/v2"

	"github.com/hunt-runner/hunt-runner/configsrc"
	"github.com/hunt-runner/hunt-runner/hunt"
	"github.com/hunt-runner/hunt-runner/schedule"
	"github.com/hunt-runner/hunt-runner/status"
	"github.com/hunt-runner/hunt-runner/store"
)

func statusCommand() *cli.Command {
	return &cli.Command{
		Name:      "status",
		Usage:     "per hunt: interval, offset, latest and next fire, watermark, lease, last run",
		ArgsUsage: "[HUNT…]",
		Description: "Hunts come from --hunts-dir/--git-url when given, otherwise from the published schedule\n" +
			"(hunt_schedule), narrowed to the hunts of --hunt-set (default \"default\"). Times are UTC, read from ClickHouse's clock. --json prints\n" +
			`{"now": …, "hunts": [{"hunt_id", "interval_seconds", "offset_seconds", "enabled", "latest_fire", ` + "\n" +
			`"next_fire", "watermark", "behind_seconds", "lease_owner", "lease_until", "last_run_status", …}],` + "\n" +
			`"runners": [{"owner", "version", "hunt_set", "set_hash", "hunts", "last_seen", "started", …}], "runners_live": …}` + "\n" +
			"with the runners whose heartbeat is under two minutes old.",
		Flags: concat(interactiveClickhouseFlags(), sourceFlags(), []cli.Flag{
			huntSetFlag(),
			&cli.BoolFlag{Name: "json", Usage: "print JSON"},
		}),
		Action: statusAction,
	}
}

func statusAction(c *cli.Context) error {
	ids, err := interspersedArgs(c)
	if err != nil {
		return err
	}
	set, err := huntSet(c, hunt.HuntSetDefault)
	if err != nil {
		return err
	}
	log := newLogger(c)
	var entries []hunt.Hunt // nil: the published schedule
	src, ok, err := optionalHuntSource(c, log)
	if err != nil {
		return err
	}
	conn, chOpts, err := openClickHouse(c, log)
	if err != nil {
		return err
	}
	defer conn.Close()
	var files *status.HuntFiles
	if ok {
		// Loaded as a runner loads them, the server's check included, so a file only the
		// server rejects is reported here too.
		policy, err := huntPolicy(c)
		if err != nil {
			return err
		}
		set, _, err := configsrc.NewLoader(src, 0, log, configsrc.WithServerCheck(conn, policy)).Load(c.Context)
		if err != nil {
			return cli.Exit(fmt.Sprintf("load hunts: %v", err), exitError)
		}
		entries = set.Hunts
		f := huntFilesOf(set)
		files = &f
	}
	rep, err := status.Read(c.Context, store.New(conn, chOpts.Database), entries)
	if err != nil {
		return cli.Exit(err.Error(), exitError)
	}
	if !ok {
		// No hunt source here: the files' problems are the ones the set's runners report in
		// their heartbeats.
		beats, now, err := store.New(conn, chOpts.Database).Heartbeats(c.Context)
		if err != nil {
			return cli.Exit(err.Error(), exitError)
		}
		if f, reported := status.ReportedFiles(beats, now, set); reported {
			files = &f
		}
	}
	if files != nil {
		rep.MarkFiles(*files)
	}
	if !ok {
		// The published schedule holds every set's hunts; leave out other sets'.
		sets, err := store.New(conn, chOpts.Database).Schedule().HuntSets(c.Context)
		if err != nil {
			return cli.Exit(err.Error(), exitError)
		}
		kept := rep.Hunts[:0]
		for _, h := range rep.Hunts {
			if s, published := sets[h.HuntID]; !published || s == set {
				kept = append(kept, h)
			}
		}
		rep.Hunts = kept
	}
	if len(ids) > 0 {
		want := map[string]bool{}
		for _, a := range ids {
			want[a] = true
		}
		kept := rep.Hunts[:0]
		for _, h := range rep.Hunts {
			if want[h.HuntID] {
				kept = append(kept, h)
				delete(want, h.HuntID)
			}
		}
		if len(want) > 0 {
			missing := make([]string, 0, len(want))
			for id := range want {
				missing = append(missing, id)
			}
			sort.Strings(missing)
			return cli.Exit(fmt.Sprintf("unknown hunt(s): %s", strings.Join(missing, ", ")), exitUsage)
		}
		rep.Hunts = kept
	}
	if c.Bool("json") {
		enc := json.NewEncoder(c.App.Writer)
		enc.SetIndent("", "  ")
		return enc.Encode(rep)
	}
	printStatus(c.App.Writer, rep)
	if len(ids) > 0 {
		for _, h := range rep.Hunts {
			printRunCosts(c, conn, h.HuntID)
			printExceptions(c.App.Writer, h)
		}
		// Asked about given hunts, there is room for the whole error the table cuts.
		for _, h := range rep.Hunts {
			if h.LastRunError != "" {
				fmt.Fprintf(c.App.Writer, "error %s (%s %s):\n  %s\n", h.HuntID, h.LastRunStatus, h.LastRunTime, strings.ReplaceAll(h.LastRunError, "\n", "\n  "))
			}
		}
	}
	return nil
}

// printExceptions lists a hunt's exceptions (from the hunt files) with their recent hits.
func printExceptions(w io.Writer, h status.Hunt) {
	for _, x := range h.Exceptions {
		until := "permanent"
		if x.Until != "" {
			until = "until " + x.Until
		}
		if x.Expired {
			until = "EXPIRED " + x.Until + ", no longer applies"
		}
		fmt.Fprintf(w, "exception %s %s: owner %s, %s, %d hit(s) in 7 days: %s\n", h.HuntID, x.ID, oneLine(x.Owner), until, x.Hits, oneLine(x.Reason))
	}
}

// printHold prints a pause's or a snooze's line: who, since when, until when (forever when
// until is "-") and why.
func printHold(w io.Writer, head, by, since, until, forever, reason string) {
	end := forever
	if until != "-" {
		end = "until " + until
	}
	fmt.Fprintf(w, "%s%s since %s, %s", head, by, since, end)
	if reason != "" {
		fmt.Fprintf(w, ": %s", oneLine(reason))
	}
	fmt.Fprintln(w)
}

// printStatus renders the report as an aligned table; times are shortened to the clock when
// they fall on the report's day.
func printStatus(w io.Writer, rep status.Report) {
	day := ""
	if len(rep.Now) >= 10 {
		day = rep.Now[:10]
	}
	short := func(s string) string {
		if s == "" {
			return "-"
		}
		if strings.HasPrefix(s, day+"T") {
			return strings.TrimSuffix(s[len(day)+1:], "Z")
		}
		return s
	}
	fmt.Fprintf(w, "now %s\n", rep.Now)
	if f := rep.HuntFiles; f.Broken() {
		by := ""
		if f.ReportedBy != "" {
			by = fmt.Sprintf(" (reported by runner %s at %s)", f.ReportedBy, f.ReportedAt)
		}
		fmt.Fprintf(w, "HUNT FILES HAVE PROBLEMS%s: %d problem(s), %d hunt(s) held at the last good definition (hunt-runner validate prints each):\n", by, f.Invalid, len(f.Stale))
		for _, p := range f.Problems {
			fmt.Fprintf(w, "  %s:%d:%d: %s\n", p.File, p.Line, p.Column, oneLine(p.Message))
		}
	}
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "HUNT\tINTERVAL\tOFFSET\tENABLED\tLATEST\tNEXT\tWATERMARK\tBEHIND\tDUE\tLEASE\tLAST RUN\tROWS\tFAILS\tERROR")
	for _, h := range rep.Hunts {
		lease := "-"
		if h.LeaseLive {
			lease = h.LeaseOwner + " until " + short(h.LeaseUntil)
		}
		last := "-"
		if h.LastRunStatus != "" {
			last = h.LastRunStatus + " " + short(h.LastRunTime)
		}
		errText := h.LastRunError
		if len(errText) > 60 {
			errText = errText[:57] + "..."
		}
		if errText == "" {
			errText = "-"
		}
		// Durations as hunt files and materialise write them (5m, +2m30s), not 300s.
		interval, offset, enabled := duration(h.IntervalSeconds), "+"+duration(h.OffsetSeconds), "no"
		switch {
		case h.Enabled:
			enabled = "yes"
		case h.IntervalSeconds == 0: // a tombstone: materialise retired it, it has no schedule
			interval, offset, enabled = "-", "-", "retired"
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%v\t%s\t%s\t%d\t%d\t%s\n",
			h.HuntID, interval, offset, enabled, short(h.LatestFire), short(h.NextFire),
			short(h.Watermark), duration(h.BehindSeconds), h.Due, lease, last, h.LastRunRows,
			h.ConsecutiveFailures, strings.ReplaceAll(errText, "\n", " "))
	}
	tw.Flush()
	for _, h := range rep.Hunts {
		if h.State == status.StateNoData || h.State == status.StateOverBudget {
			fmt.Fprintf(w, "%s %s: %s\n", h.State, h.HuntID, oneLine(h.StateDetail))
		}
		if h.Stale {
			fmt.Fprintf(w, "stale %s: its file has a problem, so runners keep its last good definition (the edit is not live): %s\n", h.HuntID, oneLine(h.FileProblem))
		}
		if p := h.Pause; p != nil {
			printHold(w, "paused "+h.HuntID+": by ", p.By, short(p.Since), short(p.Until), "until resumed", p.Reason)
		}
		if z := h.Snooze; z != nil {
			printHold(w, "snoozed "+h.HuntID+": notifications muted by ", z.By, short(z.Since), short(z.Until), "until unsnoozed", z.Reason)
		}
		for _, b := range h.Backfills {
			fmt.Fprintf(w, "backfill %s of %s: %d/%d chunks, [%s, %s) done to %s (requested by %s)\n",
				b.ID, h.HuntID, b.ChunksDone, b.Chunks, short(b.From), short(b.To), short(b.Done), b.RequestedBy)
		}
	}
	if len(rep.Runners) == 0 {
		fmt.Fprintf(w, "runners: none live (%s)\n", rep.RunnersLive)
		return
	}
	fmt.Fprintf(w, "runners (%s):\n", rep.RunnersLive)
	tw = tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "  RUNNER\tVERSION\tHUNT SET\tHUNTS\tSET HASH\tLAST TICK\tSTARTED")
	for _, r := range rep.Runners {
		hash := r.SetHash
		if len(hash) > 12 {
			hash = hash[:12]
		}
		fmt.Fprintf(tw, "  %s\t%s\t%s\t%d\t%s\t%s\t%s\n", r.Owner, r.Version, r.HuntSet, r.Hunts, hash,
			short(r.LastSeen), short(r.Started))
	}
	tw.Flush()
}

func oneLine(s string) string { return strings.Join(strings.Fields(s), " ") }

func duration(seconds int64) string {
	return schedule.FormatInterval(time.Duration(seconds) * time.Second)
}

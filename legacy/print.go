package legacy

import (
	"fmt"
	"io"
	"strings"
	"time"

	"github.com/hunt-runner/hunt-runner/schedule"
)

func utc(s int64) string { return time.Unix(s, 0).UTC().Format(time.RFC3339) }

// Print writes the result, one line per hunt, then a summary line.
func (r Result) Print(w io.Writer) {
	would := func(done, dry string) string {
		if r.DryRun {
			return dry
		}
		return done
	}
	fmt.Fprintf(w, "import-legacy from %s into %s (server clock %s)%s\n", r.From, r.Database, r.Now.UTC().Format(time.RFC3339),
		would("", "; dry run, nothing is written"))
	for _, l := range r.Live {
		fmt.Fprintf(w, "  runner %s is live (last tick %s)%s\n", l.Owner, l.LastSeen,
			would(": imported under --force", ": the import will refuse until it stops (or --force)"))
	}
	if !r.HasState {
		fmt.Fprintf(w, "  (%s has no hunt_state: overrun counts are not carried)\n", r.From)
	}
	width := 0
	for _, it := range r.Items {
		width = max(width, len(it.HuntID))
	}
	for _, it := range r.Items {
		var b strings.Builder
		old := "earlier watermark " + utc(it.Legacy)
		if it.LegacyID != "" {
			old += " (kept under its file name " + it.LegacyID + ")"
		}
		switch it.Action {
		case ActionImport, ActionDone:
			if it.Action == ActionImport {
				b.WriteString(would("imported: ", "would import: ") + old)
			} else {
				b.WriteString("already imported: " + old + "; nothing to do")
			}
			if it.Watermark != it.Legacy {
				fmt.Fprintf(&b, "; watermark %s (+%s delay, so the data read continues at the earlier watermark)",
					utc(it.Watermark), schedule.FormatInterval(time.Duration(it.Watermark-it.Legacy)*time.Second))
			}
			fmt.Fprintf(&b, "; first window [%s, %s)", utc(it.FirstStart), utc(it.FirstEnd))
			if it.OffGrid {
				b.WriteString(", off the new schedule's grid: it starts at the watermark and ends at the next fire")
			}
			if it.GapEnd > it.GapStart {
				fmt.Fprintf(&b, "; longer than max_catchup: [%s, %s) will be skipped and recorded as a gap unless max_catchup is raised to %s",
					utc(it.GapStart), utc(it.GapEnd), schedule.FormatInterval(time.Duration(it.FirstEnd-it.FirstStart)*time.Second))
			}
			if !it.Enabled {
				b.WriteString("; the hunt is disabled: it resumes from here once enabled")
			}
		case ActionAhead:
			fmt.Fprintf(&b, "left alone: hunt-runner's watermark %s is at or ahead of the %s", utc(it.Current), old)
		case ActionOvertaken:
			fmt.Fprintf(&b, "left alone: a runner committed a watermark at or past %s while importing", utc(it.Watermark))
		case ActionFresh:
			b.WriteString("no watermark in the earlier runner; its first run looks back one interval")
		case ActionNotLoaded, ActionRefused:
			fmt.Fprintf(&b, "%s; %s", old, it.Reason)
		}
		if it.State != nil && (it.State.OverrunCount > 0 || it.State.TooAggressive) {
			switch {
			case it.StateCarried:
				fmt.Fprintf(&b, "; state %s: overrun_count %d, too_aggressive %t", would("carried", "would be carried"),
					it.State.OverrunCount, it.State.TooAggressive)
			case it.Action == ActionImport || it.Action == ActionDone:
				b.WriteString("; state already carried")
			}
		}
		fmt.Fprintf(w, "%-9s %-*s  %s\n", it.Action, width, it.HuntID, b.String())
	}
	fmt.Fprintf(w, "%d %s, %d already imported, %d left alone, %d fresh, %d skipped, %d refused\n",
		r.Count(ActionImport), would("imported", "to import"), r.Count(ActionDone), r.Count(ActionAhead)+r.Count(ActionOvertaken),
		r.Count(ActionFresh), r.Count(ActionNotLoaded), r.Count(ActionRefused))
}

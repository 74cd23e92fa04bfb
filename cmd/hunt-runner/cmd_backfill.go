package main

import (
	"errors"
	"fmt"
	"time"

	"github.com/urfave/cli/v2"

	"github.com/hunt-runner/hunt-runner/schedule"
	"github.com/hunt-runner/hunt-runner/store"
)

func backfillCommand() *cli.Command {
	return &cli.Command{
		Name:      "backfill",
		Usage:     "run a hunt again over a past range, or over its recorded gaps, in chunks",
		ArgsUsage: "HUNT --from TIME --to TIME [--chunk DURATION] | HUNT --gaps",
		Description: "A backfill is a row in hunt_backfill; any runner with the hunt loaded claims its chunks through\n" +
			"the claim protocol, below live fires and within a quarter of its run slots. The chunks tile\n" +
			"[--from, --to) exactly, each one run of the hunt's query over its window (the hunt's delay\n" +
			"applies) with findings stored as for live runs, and one hunt_runs row of kind 'backfill'.\n" +
			"Progress is kept under the backfill's own key, never in the hunt's lease or watermark.\n" +
			"--chunk defaults to the hunt's published interval. --gaps requests one backfill per recorded\n" +
			"gap (hunt_runs status 'gap') that no active backfill of the same range covers yet.\n" +
			"Times are RFC 3339 or epoch seconds; --to may not be in the future. HUNT must be an enabled hunt of\n" +
			"the published schedule (a typo is refused with the nearest id); --force requests it anyway, with --chunk.",
		Flags: concat(clickhouseFlags(), []cli.Flag{
			&cli.StringFlag{Name: "from", Usage: "start of the range (inclusive)"},
			&cli.StringFlag{Name: "to", Usage: "end of the range (exclusive)"},
			&cli.StringFlag{Name: "chunk", Usage: "length of one chunk (default: the hunt's interval)"},
			&cli.BoolFlag{Name: "gaps", Usage: "backfill every recorded gap of the hunt"},
			&cli.StringFlag{Name: "by", Usage: "who asks, recorded with the backfill (default: user@host)"},
			forceFlag(),
		}),
		Action: backfillAction,
		Subcommands: []*cli.Command{
			{
				Name:      "cancel",
				Usage:     "stop an active backfill (a chunk in flight finishes; committed chunks stay)",
				ArgsUsage: "ID",
				Flags: concat(clickhouseFlags(), []cli.Flag{
					&cli.StringFlag{Name: "by", Usage: "who cancels (default: user@host)"},
				}),
				Action: backfillCancelAction,
			},
			{
				Name:      "list",
				Usage:     "list backfills with their state and progress",
				ArgsUsage: "[HUNT]",
				Flags:     clickhouseFlags(),
				Action:    backfillListAction,
			},
		},
	}
}

func backfillAction(c *cli.Context) error {
	id, err := oneHunt(c)
	if err != nil {
		return err
	}
	gaps := c.Bool("gaps")
	if gaps == (c.String("from") != "" || c.String("to") != "") {
		return cli.Exit("backfill: give --from and --to, or --gaps", exitUsage)
	}
	var from, to int64
	if !gaps {
		if c.String("from") == "" || c.String("to") == "" {
			return cli.Exit("backfill: --from and --to go together", exitUsage)
		}
		if from, err = parseFireFlag(c.String("from")); err != nil {
			return cli.Exit("backfill: --from: "+err.Error(), exitUsage)
		}
		if to, err = parseFireFlag(c.String("to")); err != nil {
			return cli.Exit("backfill: --to: "+err.Error(), exitUsage)
		}
		if to <= from {
			return cli.Exit(fmt.Sprintf("backfill: --to %s is not after --from %s", rfcSec(to), rfcSec(from)), exitUsage)
		}
	}
	var chunk int64
	if s := c.String("chunk"); s != "" {
		d, err := parseDuration(s)
		if err != nil {
			return cli.Exit("backfill: --chunk: "+err.Error(), exitUsage)
		}
		if d < time.Second || d%time.Second != 0 {
			return cli.Exit(fmt.Sprintf("backfill: --chunk %s is not a whole number of seconds (at least 1s)", s), exitUsage)
		}
		chunk = int64(d / time.Second)
	}
	log := newLogger(c)
	conn, chOpts, err := openClickHouse(c, log)
	if err != nil {
		return err
	}
	defer conn.Close()
	now, err := serverNow(c, conn)
	if err != nil {
		return err
	}
	if to > now {
		return cli.Exit(fmt.Sprintf("backfill: --to %s is in the future (server now %s); live runs cover what is to come", rfcSec(to), rfcSec(now)), exitUsage)
	}
	entry, err := requirePublished(c, conn, chOpts.Database, id)
	if err != nil {
		return err
	}
	if chunk == 0 {
		if entry == nil || entry.Interval <= 0 {
			return cli.Exit("backfill: the hunt is not published, so its interval is unknown: give --chunk", exitUsage)
		}
		chunk = entry.IntervalSeconds()
	}
	wm := store.New(conn, chOpts.Database)
	ranges := [][2]int64{{from, to}}
	if gaps {
		if ranges, err = wm.Gaps(c.Context, id); err != nil {
			return cli.Exit(err.Error(), exitError)
		}
		if len(ranges) == 0 {
			fmt.Fprintf(c.App.Writer, "%s has no recorded gaps\n", id)
			return nil
		}
	}
	existing, err := wm.Backfills(c.Context, id)
	if err != nil {
		return cli.Exit(err.Error(), exitError)
	}
	by := byFlag(c)
	for _, r := range ranges {
		if b, ok := coveredBy(existing, r); ok {
			fmt.Fprintf(c.App.Writer, "backfill %s already covers %s [%s, %s): not requested again\n", b, id, rfcSec(r[0]), rfcSec(r[1]))
			continue
		}
		bid, err := wm.RequestBackfill(c.Context, store.BackfillRequest{HuntID: id, From: r[0], To: r[1], Chunk: chunk, By: by})
		if err != nil {
			return cli.Exit(err.Error(), exitError)
		}
		fmt.Fprintf(c.App.Writer, "backfill %s: %s [%s, %s) in %d chunk(s) of %s\n", bid, id, rfcSec(r[0]), rfcSec(r[1]),
			(r[1]-r[0]+chunk-1)/chunk, schedule.FormatInterval(time.Duration(chunk)*time.Second))
	}
	return nil
}

// coveredBy finds an active backfill of exactly range r, so that repeating a request (a second
// `--gaps`) does not run the same range twice.
func coveredBy(bs []store.BackfillInfo, r [2]int64) (string, bool) {
	for _, b := range bs {
		if b.State == store.BackfillActive && b.From == r[0] && b.To == r[1] {
			return b.ID, true
		}
	}
	return "", false
}

func backfillCancelAction(c *cli.Context) error {
	args, err := interspersedArgs(c)
	if err != nil {
		return err
	}
	if len(args) != 1 {
		return cli.Exit("backfill cancel needs exactly one backfill ID", exitUsage)
	}
	log := newLogger(c)
	conn, chOpts, err := openClickHouse(c, log)
	if err != nil {
		return err
	}
	defer conn.Close()
	if err := store.New(conn, chOpts.Database).CancelBackfill(c.Context, args[0], byFlag(c)); err != nil {
		if errors.Is(err, store.ErrNoBackfill) {
			return cli.Exit(fmt.Sprintf("backfill cancel: %s is not an active backfill (see `hunt-runner backfill list`)", args[0]), exitUsage)
		}
		return cli.Exit(err.Error(), exitError)
	}
	fmt.Fprintf(c.App.Writer, "cancelled backfill %s\n", args[0])
	return nil
}

func backfillListAction(c *cli.Context) error {
	args, err := interspersedArgs(c)
	if err != nil {
		return err
	}
	if len(args) > 1 {
		return cli.Exit("backfill list takes at most one HUNT id", exitUsage)
	}
	hunt := ""
	if len(args) == 1 {
		hunt = args[0]
	}
	log := newLogger(c)
	conn, chOpts, err := openClickHouse(c, log)
	if err != nil {
		return err
	}
	defer conn.Close()
	bs, err := store.New(conn, chOpts.Database).Backfills(c.Context, hunt)
	if err != nil {
		return cli.Exit(err.Error(), exitError)
	}
	for _, b := range bs {
		state := b.State
		if state == store.BackfillActive && b.Done >= b.To {
			state = "done"
		}
		chunks := (b.To - b.From + b.Chunk - 1) / b.Chunk
		done := (b.Done - b.From + b.Chunk - 1) / b.Chunk
		fmt.Fprintf(c.App.Writer, "%s  %s  %-9s  [%s, %s)  %d/%d chunks  requested %s by %s\n", b.ID, b.HuntID, state,
			rfcSec(b.From), rfcSec(b.To), done, chunks, b.Requested.UTC().Format(time.RFC3339), b.RequestedBy)
	}
	return nil
}

package schema

import (
	"context"
	"errors"
	"fmt"
	"strings"

	"github.com/ClickHouse/clickhouse-go/v2"
	"github.com/ClickHouse/clickhouse-go/v2/lib/driver"
)

// ErrLayout means the database's recorded layout is not the one this release runs on: none is
// recorded (a database `schema` never finished, or one of the first release), an older one (an
// upgrade not run or cut short), or a newer one (written by a later release).
var ErrLayout = errors.New("schema layout")

// Server error codes CheckLayout tells apart.
const (
	codeUnknownTable = 60
	codeAccessDenied = 497
)

// RecordedLayout returns the newest layout version recorded in database's hunt_schema, and
// ok = false when none is (no hunt_schema table, or no row in it). `schema` records a version
// only once every step of its upgrade is done, so a recorded version is a complete layout.
func RecordedLayout(ctx context.Context, conn driver.Conn, database string) (version uint32, ok bool, err error) {
	var n uint64
	err = conn.QueryRow(ctx, "SELECT toUInt32(max(version)), count() FROM "+QuoteIdent(database)+"."+QuoteIdent(TableSchema)).Scan(&version, &n)
	var ex *clickhouse.Exception
	if errors.As(err, &ex) && ex.Code == codeUnknownTable {
		return 0, false, nil
	}
	if err != nil {
		return 0, false, err
	}
	return version, n > 0, nil
}

// CheckLayout returns nil when database records layout Version, and otherwise an
// ErrLayout naming what to do. The commands that act on the coordination state (run, shim,
// materialise, import-legacy) call it before anything else: on a half-upgraded database the
// tables they would read are new and empty while the progress sits in tables moved aside, and
// a runner would start every hunt from scratch.
func CheckLayout(ctx context.Context, conn driver.Conn, database string) error {
	v, ok, err := RecordedLayout(ctx, conn, database)
	var ex *clickhouse.Exception
	switch {
	case errors.As(err, &ex) && ex.Code == codeAccessDenied:
		return fmt.Errorf("%w: cannot read %s.%s to check the layout (access denied): grant SELECT on it, "+
			"e.g. re-run `hunt-runner provision` for this identity", ErrLayout, database, TableSchema)
	case err != nil:
		return fmt.Errorf("check the schema layout: read %s.%s: %w", database, TableSchema, err)
	case !ok:
		return fmt.Errorf("%w: database %s records no layout version (a `hunt-runner schema` that did not finish, "+
			"or a database of the first release): run `hunt-runner schema`, which creates or finishes upgrading it "+
			"and keeps what is stored", ErrLayout, database)
	case v > Version:
		return fmt.Errorf("%w: database %s has layout version %d, newer than this release's %d: "+
			"use a hunt-runner release of layout %d or later (its `hunt-runner schema` upgraded the database)",
			ErrLayout, database, v, Version, v)
	case v < Version:
		return fmt.Errorf("%w: database %s has layout version %d, this release needs %d (an upgrade not run, or cut short): "+
			"run `hunt-runner schema` of this release, which resumes the upgrade and keeps what is stored",
			ErrLayout, database, v, Version)
	}
	// A release may add columns within a layout version (schema adds them in place); a runner
	// started before that would fail every write naming one. An identity sees in
	// system.columns only the tables it may read (the scaler: none of them), so those are the
	// ones checked; one that may not read it at all skips this part.
	missing, err := missingColumns(ctx, conn, database)
	switch {
	case errors.As(err, &ex) && ex.Code == codeAccessDenied:
		return nil
	case err != nil:
		return fmt.Errorf("check the schema layout: %w", err)
	}
	if len(missing) > 0 {
		names := make([]string, len(missing))
		for i, m := range missing {
			names[i] = m.table + "." + m.col.name
		}
		return fmt.Errorf("%w: database %s lacks the column(s) %s of this release: run `hunt-runner schema` of this "+
			"release, which adds them in place and keeps what is stored", ErrLayout, database, strings.Join(names, ", "))
	}
	return nil
}

package configsrc

import (
	"context"
	"fmt"
	"strings"

	"github.com/ClickHouse/clickhouse-go/v2"
	"github.com/ClickHouse/clickhouse-go/v2/lib/driver"

	"github.com/hunt-runner/hunt-runner/hunt"
)

// CheckSourcesWithServer looks up h's declared sources in the server's catalogue
// (system.columns, which lists a table's columns only when the table exists): each table must
// exist and have its time column. It evaluates nothing of the hunt. An unqualified table is
// looked up in the connection's current database, as the hunt's statement would resolve it.
// The problems carry the file and line of the source's entry; err is set only when the server
// could not be asked (not a verdict).
func CheckSourcesWithServer(ctx context.Context, conn driver.Conn, h hunt.Hunt) ([]Problem, error) {
	var out []Problem
	for _, s := range h.Sources {
		db, table, qualified := strings.Cut(s.Table, ".")
		if !qualified {
			db, table = "", s.Table
		}
		var tables, columns uint64
		qctx := clickhouse.Context(ctx, clickhouse.WithParameters(clickhouse.Parameters{"db": db, "t": table, "col": s.TimeColumn}))
		err := conn.QueryRow(qctx, `SELECT count(), countIf(name = {col:String}) FROM system.columns
WHERE database = if({db:String} = '', currentDatabase(), {db:String}) AND table = {t:String}`).Scan(&tables, &columns)
		if err != nil {
			return nil, fmt.Errorf("look up source %s: %w", s.Table, err)
		}
		p := Problem{File: h.File, Line: max(s.Line, 1), Column: 1, HuntID: h.ID}
		switch {
		case tables == 0:
			p.Message = fmt.Sprintf("sources: table %s does not exist on the server (or the identity may not see it)", s.Table)
		case columns == 0:
			p.Message = fmt.Sprintf("sources: table %s has no column %s", s.Table, s.TimeColumn)
		default:
			continue
		}
		out = append(out, p)
	}
	return out, nil
}

package schema

import (
	"context"
	"fmt"
	"strings"

	"github.com/ClickHouse/clickhouse-go/v2"
)

// Insert returns the statement of a batch insert of cols into a coordination table, and ctx
// carrying those columns' types from the schema. Over HTTP clickhouse-go otherwise asks the
// server (DESCRIBE TABLE) before every batch: one more round trip per insert, which on the
// runner's path was one statement in eight. It panics on a table or column the schema does not
// have: a programming error, caught by any test that writes the table.
func Insert(ctx context.Context, database, table string, cols ...string) (context.Context, string) {
	types := make([]clickhouse.ColumnNameAndType, len(cols))
	for i, c := range cols {
		types[i] = clickhouse.ColumnNameAndType{Name: c, Type: columnType(table, c)}
	}
	q := "INSERT INTO " + QuoteIdent(database) + "." + QuoteIdent(table) + " (" + strings.Join(cols, ", ") + ")"
	return clickhouse.Context(ctx, clickhouse.WithColumnNamesAndTypes(types)), q
}

// columnType is a column's type as the schema declares it, without its DEFAULT.
func columnType(table, col string) string {
	for _, t := range tables {
		if t.name != table {
			continue
		}
		for _, c := range t.columns {
			if c.name == col {
				typ, _, _ := strings.Cut(c.typ, " DEFAULT ")
				return typ
			}
		}
	}
	panic(fmt.Sprintf("schema: no column %s in table %s", col, table))
}

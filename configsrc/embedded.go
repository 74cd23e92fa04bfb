package configsrc

import (
	"context"
	"errors"
	"strings"

	"github.com/ClickHouse/clickhouse-go/v2/lib/driver"

	"github.com/hunt-runner/hunt-runner/hunt"
)

// embeddedParserSays opens a syntax error found by CheckWithParser: the author must not go
// looking for a server that was never asked.
const embeddedParserSays = "ClickHouse's parser (the embedded engine, no server) says: "

// CheckWithParser is CheckWithServer's parse-and-allowlist check on an engine that is not the
// server the hunts run on: the embedded engine `validate` starts, empty, when no server is
// given. Its parse is ClickHouse's own (EXPLAIN AST, which evaluates nothing), so a syntax error
// the lexical check misses is caught and placed, and the tree is held to the same wrapper,
// node-kind, function, table-function, dictionary, system-name and SETTINGS rules. It resolves
// no names (the engine has none of the source tables), and its version may not be the
// server's: a query that only a newer server parses is refused here.
func CheckWithParser(ctx context.Context, conn driver.Conn, h hunt.Hunt, p Policy) error {
	err := CheckWithServer(ctx, conn, h, p)
	if re := (*RefusedError)(nil); errors.As(err, &re) {
		re.Msg = strings.Replace(re.Msg, serverParserSays, embeddedParserSays, 1)
	}
	return err
}

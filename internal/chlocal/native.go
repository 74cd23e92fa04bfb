package chlocal

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"io"

	chproto "github.com/ClickHouse/ch-go/proto"
	"github.com/ClickHouse/clickhouse-go/v2/lib/column"
)

// minRevisionCustomSerialization is DBMS_MIN_REVISION_WITH_CUSTOM_SERIALIZATION:
// from this revision on, a client expects one "has custom serialization"
// byte after each column's type.
const minRevisionCustomSerialization = 54454

// reframeNative rewrites chDB's Native output, which is always framed as
// for protocol revision 0, into the framing a client of the given revision
// expects: a BlockInfo before each block and, from revision 54454, a zero
// "custom serialization" byte after each column type. Column data is copied
// verbatim; clickhouse-go's decoders are used only to find where each
// column ends, because decoding and re-encoding is lossy for some types.
func reframeNative(in []byte, revision uint64, sc *column.ServerContext) ([]byte, error) {
	if revision == 0 {
		return in, nil
	}
	src := bytes.NewReader(in)
	// chproto.NewReader keeps a *bufio.Reader that is at least its own
	// buffer size (128 KiB) instead of wrapping it, so the read position is
	// exactly len(in) - src.Len() - br.Buffered().
	br := bufio.NewReaderSize(src, 1<<20)
	r := chproto.NewReader(br)
	pos := func() int { return len(in) - src.Len() - br.Buffered() }

	var out chproto.Buffer
	out.Buf = make([]byte, 0, len(in)+len(in)/64+64)
	for {
		if _, err := br.Peek(1); errors.Is(err, io.EOF) {
			break
		} else if err != nil {
			return nil, err
		}
		numCols, err := r.UVarInt()
		if err != nil {
			return nil, fmt.Errorf("native: column count: %w", err)
		}
		numRows, err := r.UVarInt()
		if err != nil {
			return nil, fmt.Errorf("native: row count: %w", err)
		}
		// BlockInfo: field 1 is_overflows=false, field 2 bucket_num=-1, end.
		out.PutUVarInt(1)
		out.PutBool(false)
		out.PutUVarInt(2)
		out.PutInt32(-1)
		out.PutUVarInt(0)
		out.PutUVarInt(numCols)
		out.PutUVarInt(numRows)
		for i := uint64(0); i < numCols; i++ {
			name, err := r.Str()
			if err != nil {
				return nil, fmt.Errorf("native: column name: %w", err)
			}
			typ, err := r.Str()
			if err != nil {
				return nil, fmt.Errorf("native: column %s type: %w", name, err)
			}
			out.PutString(name)
			out.PutString(typ)
			if revision >= minRevisionCustomSerialization {
				out.PutBool(false)
			}
			if numRows == 0 {
				continue
			}
			start := pos()
			col, err := column.Type(typ).Column(name, sc)
			if err != nil {
				return nil, fmt.Errorf("native: column %s %s: %w", name, typ, err)
			}
			if cs, ok := col.(column.CustomSerialization); ok {
				if err := cs.ReadStatePrefix(r); err != nil {
					return nil, fmt.Errorf("native: column %s %s prefix: %w", name, typ, err)
				}
			}
			if err := col.Decode(r, int(numRows)); err != nil {
				return nil, fmt.Errorf("native: column %s %s: %w", name, typ, err)
			}
			out.Buf = append(out.Buf, in[start:pos()]...)
		}
	}
	return out.Buf, nil
}

package chlocal

import (
	"errors"
	"fmt"
	"os"
	"runtime"
	"unsafe"

	"github.com/ebitengine/purego"
)

// ErrNoLibrary is returned by Start when the chDB library path is empty or
// does not name a readable file.
var ErrNoLibrary = errors.New("chlocal: chDB library not found")

// checkLibrary reports ErrNoLibrary unless path names a file.
func checkLibrary(path string) error {
	if path == "" {
		return fmt.Errorf("%w: CHDB_LIB_PATH is not set (point it at libchdb.so, e.g. run `make chdb`)", ErrNoLibrary)
	}
	st, err := os.Stat(path)
	if err != nil {
		return fmt.Errorf("%w: %s: %w", ErrNoLibrary, path, err)
	}
	if st.IsDir() {
		return fmt.Errorf("%w: %s is a directory, not libchdb.so", ErrNoLibrary, path)
	}
	return nil
}

// lib holds the chDB C API entry points. Query text, format and parameter
// values are passed as pointer plus length (the *_n variants) because
// Native INSERT bodies and parameter values may contain NUL bytes, which
// purego's string conversion would truncate.
type lib struct {
	connect         func(argc int32, argv **byte) *uintptr
	closeConn       func(conn *uintptr)
	queryN          func(conn uintptr, query *byte, queryLen uintptr, format *byte, formatLen uintptr) uintptr
	queryParamsN    func(conn uintptr, query *byte, queryLen uintptr, format *byte, formatLen uintptr, names **byte, nameLens *uintptr, values **byte, valueLens *uintptr, count uintptr) uintptr
	resultBuffer    func(res uintptr) *byte
	resultLength    func(res uintptr) uintptr
	resultError     func(res uintptr) *byte
	destroyResult   func(res uintptr)
	setSignalsOnOff func(enabled int32)
}

// engine is one chDB connection. It is not safe for concurrent use; the
// server serialises every request.
type engine struct {
	fn     lib
	handle *uintptr // chdb_connection*: chdb_query* takes *handle
}

// openEngine loads the library at path (checked by Start) and connects with
// argv = clickhouse --path=<dataPath>.
func openEngine(path, dataPath string) (*engine, error) {
	h, err := purego.Dlopen(path, purego.RTLD_NOW|purego.RTLD_GLOBAL)
	if err != nil {
		return nil, fmt.Errorf("chlocal: load %s: %w", path, err)
	}
	var e engine
	syms := []struct {
		fn   any
		name string
	}{
		{&e.fn.connect, "chdb_connect"},
		{&e.fn.closeConn, "chdb_close_conn"},
		{&e.fn.queryN, "chdb_query_n"},
		{&e.fn.queryParamsN, "chdb_query_with_params_n"},
		{&e.fn.resultBuffer, "chdb_result_buffer"},
		{&e.fn.resultLength, "chdb_result_length"},
		{&e.fn.resultError, "chdb_result_error"},
		{&e.fn.destroyResult, "chdb_destroy_query_result"},
		{&e.fn.setSignalsOnOff, "chdb_set_signal_handlers_enabled"},
	}
	for _, s := range syms {
		// Dlsym first: RegisterLibFunc panics on a missing symbol, and a
		// library of the wrong version should fail with an error instead.
		if _, err := purego.Dlsym(h, s.name); err != nil {
			return nil, fmt.Errorf("chlocal: %s lacks %s (wrong chDB version?): %w", path, s.name, err)
		}
		purego.RegisterLibFunc(s.fn, h, s.name)
	}

	argv := []string{"clickhouse", "--path=" + dataPath}
	cargs := make([][]byte, len(argv))
	ptrs := make([]*byte, len(argv)+1)
	for i, a := range argv {
		cargs[i] = append([]byte(a), 0)
		ptrs[i] = &cargs[i][0]
	}
	// chDB installs crash handlers for SIGSEGV, SIGBUS, … on connect, which
	// the Go runtime needs for itself (nil dereference panics, stack growth,
	// preemption). Turning them off also resets those signals to SIG_DFL, so
	// the Go runtime's handlers are saved before and put back after.
	saved := saveSignals()
	e.fn.setSignalsOnOff(0)
	e.handle = e.fn.connect(int32(len(argv)), &ptrs[0])
	restoreSignals(saved)
	runtime.KeepAlive(cargs)
	if e.handle == nil || *e.handle == 0 {
		return nil, fmt.Errorf("chlocal: chdb_connect failed (data path %s)", dataPath)
	}
	return &e, nil
}

func (e *engine) close() {
	if e.handle != nil {
		e.fn.closeConn(e.handle)
		e.handle = nil
	}
}

// queryError is an error reported by chDB for one statement; its text is
// ClickHouse's exception message.
type queryError struct{ msg string }

func (e *queryError) Error() string { return e.msg }

// query runs one statement and returns chDB's output in the given format.
// A nil slice with a nil error is an empty result.
func (e *engine) query(sql []byte, format string, names, values []string) ([]byte, error) {
	if len(sql) == 0 {
		return nil, &queryError{msg: "Code: 62. DB::Exception: Empty query. (SYNTAX_ERROR)"}
	}
	f := []byte(format)
	if len(f) == 0 {
		f = []byte("TabSeparated")
	}
	var res uintptr
	if len(names) == 0 {
		res = e.fn.queryN(*e.handle, &sql[0], uintptr(len(sql)), &f[0], uintptr(len(f)))
	} else {
		n := len(names)
		nb := make([][]byte, n)
		vb := make([][]byte, n)
		np := make([]*byte, n)
		vp := make([]*byte, n)
		nl := make([]uintptr, n)
		vl := make([]uintptr, n)
		for i := range names {
			nb[i] = append([]byte(names[i]), 0)
			vb[i] = append([]byte(values[i]), 0) // the NUL keeps &vb[i][0] valid for empty values
			np[i], vp[i] = &nb[i][0], &vb[i][0]
			nl[i], vl[i] = uintptr(len(names[i])), uintptr(len(values[i]))
		}
		res = e.fn.queryParamsN(*e.handle, &sql[0], uintptr(len(sql)), &f[0], uintptr(len(f)),
			&np[0], &nl[0], &vp[0], &vl[0], uintptr(n))
		runtime.KeepAlive(nb)
		runtime.KeepAlive(vb)
	}
	runtime.KeepAlive(sql)
	runtime.KeepAlive(f)
	if res == 0 {
		return nil, &queryError{msg: "Code: 1001. DB::Exception: chDB returned no result. (STD_EXCEPTION)"}
	}
	defer e.fn.destroyResult(res)
	if p := e.fn.resultError(res); p != nil {
		return nil, &queryError{msg: cString(p)}
	}
	n := int(e.fn.resultLength(res))
	buf := e.fn.resultBuffer(res)
	if n == 0 || buf == nil {
		return nil, nil
	}
	out := make([]byte, n)
	copy(out, unsafe.Slice(buf, n))
	return out, nil
}

// cString copies a NUL-terminated C string.
func cString(p *byte) string {
	var n int
	for *(*byte)(unsafe.Add(unsafe.Pointer(p), n)) != 0 {
		n++
	}
	return string(unsafe.Slice(p, n))
}

package chlocal

import (
	"compress/gzip"
	"compress/zlib"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"maps"
	"net/http"
	"net/url"
	"os"
	"regexp"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/ClickHouse/ch-go/compress"
	"github.com/andybalholm/brotli"
	"github.com/google/uuid"
	"github.com/klauspost/compress/zstd"

	"github.com/hunt-runner/hunt-runner/internal/chlocal/ctl"
)

// reservedParams are URL parameters of the HTTP interface itself, not settings.
var reservedParams = map[string]bool{
	"query": true, "database": true, "default_format": true, "query_id": true,
	"compress": true, "decompress": true, "client_protocol_version": true,
	"user": true, "password": true, "quota_key": true, "session_id": true,
	"session_timeout": true, "session_check": true, "buffer_size": true,
	"wait_end_of_query": true, "network_compression_method": true,
	"network_zstd_compression_level": true, "role": true, "stacktrace": true,
}

var (
	settingNameRe = regexp.MustCompile(`^[A-Za-z_][A-Za-z0-9_]*$`)
	// An INSERT whose data is the request body: the query parameter ends in
	// [SETTINGS …] FORMAT X. FROM INFILE has to go before SETTINGS/FORMAT.
	insertDataRe = regexp.MustCompile(`(?is)^(\s*INSERT\b.*?)((?:\s+SETTINGS\s+.*?)?\s+FORMAT\s+[A-Za-z0-9_]+)\s*;?\s*$`)
	// A trailing FORMAT clause selects the output format of a query.
	formatClauseRe = regexp.MustCompile(`(?is)\bFORMAT\s+([A-Za-z0-9_]+)\s*;?\s*$`)
	insertRe       = regexp.MustCompile(`(?is)^\s*INSERT\b`)
)

// maxFrame bounds one compressed response block, as clickhouse-server does.
const maxFrame = 1 << 20

func (s *Server) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if why := s.refusal(r); why != "" {
		s.log.Warn("chlocal: request refused", slog.String("reason", why))
		s.fail(w, exception{code: 195, name: "IP_ADDRESS_NOT_ALLOWED", msg: "chlocal: " + why}, http.StatusForbidden)
		return
	}
	if s.serveControl(w, r) {
		return
	}
	switch r.URL.Path {
	case "/ping":
		io.WriteString(w, "Ok.\n")
		return
	case "/":
	default:
		s.fail(w, exception{code: 1001, name: "STD_EXCEPTION", msg: "There is no handle " + r.URL.Path}, http.StatusNotFound)
		return
	}
	params := r.URL.Query()
	body, err := readBody(r, params.Get("decompress") == "1")
	if err != nil {
		s.fail(w, exception{code: 27, name: "CANNOT_PARSE_INPUT_ASSERTION_FAILED", msg: "Cannot read request body: " + err.Error()}, http.StatusBadRequest)
		return
	}
	if params.Get("query") == "" && len(body) == 0 {
		io.WriteString(w, "Ok.\n")
		return
	}
	s.serveQuery(w, params, body)
}

// readBody returns the request body with its Content-Encoding and, when
// decompress=1, ClickHouse block compression undone.
func readBody(r *http.Request, blocks bool) ([]byte, error) {
	var in io.Reader = r.Body
	switch enc := strings.ToLower(r.Header.Get("Content-Encoding")); enc {
	case "", "identity":
	case "gzip":
		zr, err := gzip.NewReader(r.Body)
		if err != nil {
			return nil, fmt.Errorf("gzip: %w", err)
		}
		in = zr
	case "deflate":
		zr, err := zlib.NewReader(r.Body)
		if err != nil {
			return nil, fmt.Errorf("deflate: %w", err)
		}
		in = zr
	case "br":
		in = brotli.NewReader(r.Body)
	case "zstd":
		zr, err := zstd.NewReader(r.Body)
		if err != nil {
			return nil, fmt.Errorf("zstd: %w", err)
		}
		defer zr.Close()
		in = zr
	default:
		return nil, fmt.Errorf("unsupported Content-Encoding %q", enc)
	}
	if blocks {
		in = compress.NewReader(in)
	}
	b, err := io.ReadAll(in)
	// ch-go's block reader ends with a wrapped io.EOF, which ReadAll does not
	// recognise as the end.
	if err != nil && !errors.Is(err, io.EOF) {
		return nil, err
	}
	return b, nil
}

// request is one SQL request, parsed from the URL and body.
type request struct {
	text       string // the statement as sent, without INSERT data: what faults match and the log records
	sql        []byte
	database   string
	format     string
	names      []string // param_* names, without the prefix
	values     []string
	settings   []setting
	protocol   uint64 // client_protocol_version, 0 if absent
	infile     string // temporary file holding INSERT data, removed after the query
	compressed bool   // compress=1: answer in ClickHouse compressed blocks
	method     compress.Method
}

type setting struct{ name, value string }

func (s *Server) serveQuery(w http.ResponseWriter, params url.Values, body []byte) {
	req, ex := s.parseRequest(params, body)
	if req.infile != "" {
		defer os.Remove(req.infile)
	}
	kind := ctl.Classify(req.text)
	seq := s.stmts.Add(ctl.Statement{
		Time: time.Now().UTC(), QueryID: params.Get("query_id"), Kind: kind, Database: req.database,
		SQL: req.text, Settings: settingsMap(req.settings), Params: paramsMap(req.names, req.values),
	})
	code := s.answer(w, params.Get("query_id"), req, ex, kind, seq)
	s.stmts.Finish(seq, code)
}

// answer runs a parsed request, with the fault that fires on it if any, and
// returns the exception code it sent (0 for success). Injected delays are
// spent outside the session lock, so that they hold up only their own request.
func (s *Server) answer(w http.ResponseWriter, queryID string, req request, ex *exception, kind ctl.Kind, seq uint64) int {
	if ex != nil {
		s.fail(w, *ex, ex.status())
		return ex.code
	}
	if queryID == "" {
		queryID = uuid.NewString()
	}
	s.queries.Add(1)
	var rule ctl.FaultRule
	faulty := false
	if in := s.faults.Load(); in != nil {
		rule, faulty = in.Decide(kind, req.text)
	}
	if faulty {
		s.stmts.SetFault(seq, rule.Name, rule.Effect)
		w.Header().Set("X-Chlocal-Fault", rule.Name)
		s.log.Debug("chlocal: fault", slog.String("rule", rule.Name), slog.String("effect", string(rule.Effect)),
			slog.Duration("delay", rule.Delay))
		switch rule.Effect {
		case ctl.DelayStart:
			if !s.hold(rule.Delay) {
				return s.failWith(w, exception{code: 1001, name: "STD_EXCEPTION", msg: "chlocal is closing"})
			}
		case ctl.FailBefore:
			s.hold(rule.Delay)
			return s.failWith(w, injected(rule))
		}
	}
	out, err := s.run(req)
	s.stmts.SetExecuted(seq)
	if faulty {
		switch rule.Effect {
		case ctl.DelayAnswer:
			s.hold(rule.Delay)
		case ctl.FailAfter:
			s.hold(rule.Delay)
			return s.failWith(w, injected(rule))
		}
	}
	if err != nil {
		ex := parseException(err.Error())
		s.log.Debug("chlocal: query failed", slog.Int("code", ex.code), slog.String("err", ex.msg))
		return s.failWith(w, ex)
	}
	if len(out) > 0 && req.format == "Native" && req.protocol > 0 {
		out, err = reframeNative(out, min(req.protocol, s.revision), &s.sc)
		if err != nil {
			return s.failWith(w, exception{code: 1001, name: "STD_EXCEPTION", msg: "chlocal: " + err.Error()})
		}
	}
	if len(out) > 0 && req.compressed {
		if out, err = compressBlocks(out, req.method); err != nil {
			return s.failWith(w, exception{code: 1001, name: "STD_EXCEPTION", msg: "chlocal: " + err.Error()})
		}
	}
	h := w.Header()
	h.Set("X-ClickHouse-Query-Id", queryID)
	h.Set("X-ClickHouse-Format", req.format)
	h.Set("X-ClickHouse-Timezone", s.timezone)
	h.Set("X-ClickHouse-Server-Display-Name", "chlocal")
	if req.format == "Native" || req.compressed {
		h.Set("Content-Type", "application/octet-stream")
	} else {
		h.Set("Content-Type", "text/plain; charset=UTF-8")
	}
	h.Set("Content-Length", strconv.Itoa(len(out)))
	w.WriteHeader(http.StatusOK)
	_, _ = w.Write(out)
	return 0
}

// injected is the exception a fail_after or fail_before rule sends.
func injected(rule ctl.FaultRule) exception {
	msg := rule.Message
	if msg == "" {
		msg = "chlocal: fault " + rule.Name + " (" + string(rule.Effect) + ") injected"
	}
	return exception{code: rule.Code, name: ctl.ErrorName(rule.Code), msg: msg}
}

func settingsMap(settings []setting) map[string]string {
	if len(settings) == 0 {
		return nil
	}
	m := make(map[string]string, len(settings))
	for _, st := range settings {
		m[st.name] = st.value
	}
	return m
}

func paramsMap(names, values []string) map[string]string {
	if len(names) == 0 {
		return nil
	}
	m := make(map[string]string, len(names))
	for i, n := range names {
		m[n] = values[i]
	}
	return m
}

func (s *Server) parseRequest(params url.Values, body []byte) (request, *exception) {
	req := request{
		database: params.Get("database"),
		format:   params.Get("default_format"),
		method:   compress.LZ4,
	}
	if req.database == "" {
		req.database = "default"
	}
	if req.format == "" {
		req.format = "TabSeparated"
	}
	if v := params.Get("client_protocol_version"); v != "" {
		req.protocol, _ = strconv.ParseUint(v, 10, 64)
	}
	req.compressed = params.Get("compress") == "1"
	if strings.EqualFold(params.Get("network_compression_method"), "ZSTD") {
		req.method = compress.ZSTD
	}
	keys := make([]string, 0, len(params))
	for k := range params {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	for _, k := range keys {
		v := params.Get(k)
		switch {
		case strings.HasPrefix(k, "param_"):
			req.names = append(req.names, strings.TrimPrefix(k, "param_"))
			req.values = append(req.values, v)
		case reservedParams[k]:
		case strings.HasSuffix(k, "_structure"), strings.HasSuffix(k, "_types"), isExternalFormat(params, k):
			// external table descriptions: not supported, and not settings
		default:
			if !settingNameRe.MatchString(k) {
				return req, &exception{code: 115, name: "UNKNOWN_SETTING", msg: fmt.Sprintf("Unknown setting '%s'", k)}
			}
			req.settings = append(req.settings, setting{k, v})
		}
	}

	query := params.Get("query")
	req.text = query
	switch {
	case query != "" && len(body) > 0:
		if m := insertDataRe.FindStringSubmatch(query); m != nil {
			f, err := os.CreateTemp("", "chlocal-insert-")
			if err != nil {
				return req, &exception{code: 1001, name: "STD_EXCEPTION", msg: "chlocal: " + err.Error()}
			}
			req.infile = f.Name()
			_, werr := f.Write(body)
			if cerr := f.Close(); werr == nil {
				werr = cerr
			}
			if werr != nil {
				return req, &exception{code: 1001, name: "STD_EXCEPTION", msg: "chlocal: " + werr.Error()}
			}
			// chDB truncates inline binary INSERT data after about 64 KiB,
			// so the body goes through a file instead.
			req.sql = []byte(s.rewrite(m[1]) + " FROM INFILE " + quote(req.infile) + m[2])
			return req, nil
		}
		req.sql = append(append([]byte(s.rewrite(query)), '\n'), body...)
	case query != "":
		req.sql = []byte(s.rewrite(query))
	default:
		req.text = string(body)
		req.sql = body
		if !insertRe.Match(body) {
			req.sql = []byte(s.rewrite(string(body)))
		}
	}
	if !insertRe.Match(req.sql) {
		if m := formatClauseRe.FindSubmatch(req.sql); m != nil {
			req.format = string(m[1])
		}
	}
	return req, nil
}

// isExternalFormat reports whether k is an external table's <name>_format
// parameter rather than a setting such as date_time_input_format.
func isExternalFormat(params url.Values, k string) bool {
	name, ok := strings.CutSuffix(k, "_format")
	return ok && (params.Has(name+"_structure") || params.Has(name+"_types"))
}

func (s *Server) rewrite(sql string) string {
	sql = stripDropSync(sql)
	if !s.opts.RewriteReplicated {
		return sql
	}
	return rewriteReplicated(sql)
}

// useRe finds statements that may change the session's database.
var useRe = regexp.MustCompile(`(?i)\bUSE\b`)

// run executes a request on the shared session. The session is first put
// in the request's state (database, settings): a USE only when the database
// differs from the last one set, and settings changed relative to the
// previous request, with every setting the request does not name restored
// to the startup snapshot. That costs at most one SET per request and is
// equivalent to restoring after each request, since nothing runs between
// requests.
func (s *Server) run(req request) ([]byte, error) {
	s.session <- struct{}{}
	defer func() { <-s.session }()
	if s.eng == nil {
		return nil, &queryError{msg: "Code: 1001. DB::Exception: chlocal is closed. (STD_EXCEPTION)"}
	}
	if s.curDB != req.database {
		if _, err := s.eng.query([]byte("USE "+quoteIdent(req.database)), "", nil, nil); err != nil {
			s.curDB = ""
			return nil, err
		}
		s.curDB = req.database
	}
	if err := s.applySettings(req.settings); err != nil {
		return nil, err
	}
	out, err := s.eng.query(req.sql, req.format, req.names, req.values)
	if useRe.Match(req.sql) {
		s.curDB = "" // a USE statement leaks into the session; force ours next time
	}
	return out, err
}

// applySettings brings the session's per-request settings from s.applied
// to want. Settings are restored to the startup snapshot, not with
// SET x = DEFAULT, which would restore chDB's compiled-in default instead.
func (s *Server) applySettings(want []setting) error {
	wanted := make(map[string]string, len(want))
	for _, st := range want {
		wanted[st.name] = st.value
	}
	if maps.Equal(wanted, s.applied) {
		return nil
	}
	// A session in readonly mode refuses every SET but the one lifting it, whereas a real
	// server starts each request afresh: readonly is lifted first, on its own, and set last.
	if _, ok := s.applied[readonlySetting]; ok {
		if _, err := s.eng.query([]byte("SET "+s.restoreAssignment(readonlySetting)), "", nil, nil); err != nil {
			return err
		}
		delete(s.applied, readonlySetting)
	}
	var restore []string
	for name := range s.applied {
		if _, ok := wanted[name]; !ok {
			restore = append(restore, name)
		}
	}
	sort.Strings(restore)
	parts := make([]string, 0, len(restore)+len(want))
	for _, name := range restore {
		parts = append(parts, s.restoreAssignment(name))
	}
	for _, st := range want {
		if cur, ok := s.applied[st.name]; st.name != readonlySetting && (!ok || cur != st.value) {
			parts = append(parts, st.name+" = "+quote(st.value))
		}
	}
	if v, ok := wanted[readonlySetting]; ok {
		parts = append(parts, readonlySetting+" = "+quote(v))
	}
	if len(parts) == 0 {
		s.applied = wanted
		return nil
	}
	_, err := s.eng.query([]byte("SET "+strings.Join(parts, ", ")), "", nil, nil)
	if err == nil {
		s.applied = wanted
		return nil
	}
	// An unknown name fails the whole statement; put every setting that may
	// have changed back one by one (readonly first), ignoring the unknown ones.
	_, _ = s.eng.query([]byte("SET "+s.restoreAssignment(readonlySetting)), "", nil, nil)
	for name := range s.applied {
		wanted[name] = ""
	}
	for name := range wanted {
		_, _ = s.eng.query([]byte("SET "+s.restoreAssignment(name)), "", nil, nil)
	}
	s.applied = nil
	return err
}

// readonlySetting is the one setting whose value decides whether any other may change.
const readonlySetting = "readonly"

func (s *Server) restoreAssignment(name string) string {
	if v, ok := s.snapshot[name]; ok {
		return name + " = " + quote(v)
	}
	return name + " = DEFAULT"
}

// compressBlocks frames out as ClickHouse compressed blocks of at most maxFrame bytes.
func compressBlocks(out []byte, m compress.Method) ([]byte, error) {
	zw := compress.NewWriter(compress.LevelZero, m)
	res := make([]byte, 0, len(out)/2+64)
	for len(out) > 0 {
		n := min(len(out), maxFrame)
		if err := zw.Compress(out[:n]); err != nil {
			return nil, fmt.Errorf("compress: %w", err)
		}
		res = append(res, zw.Data...)
		out = out[n:]
	}
	return res, nil
}

// failWith writes an exception with its usual status and returns its code.
func (s *Server) failWith(w http.ResponseWriter, ex exception) int {
	s.fail(w, ex, ex.status())
	return ex.code
}

// fail writes an exception as clickhouse-server does.
func (s *Server) fail(w http.ResponseWriter, ex exception, status int) {
	h := w.Header()
	h.Set("Content-Type", "text/plain; charset=UTF-8")
	h.Set("X-ClickHouse-Exception-Code", strconv.Itoa(ex.code))
	if ex.name != "" {
		h.Set("X-ClickHouse-Exception-Name", ex.name)
	}
	body := ex.body(s.version)
	h.Set("Content-Length", strconv.Itoa(len(body)))
	w.WriteHeader(status)
	_, _ = io.WriteString(w, body)
}

// memoryUsage reports the process's resident and peak resident memory in
// bytes from /proc/self/status (zero where unavailable).
func memoryUsage() (rss, hwm int64) {
	b, err := os.ReadFile("/proc/self/status")
	if err != nil {
		return 0, 0
	}
	for line := range strings.SplitSeq(string(b), "\n") {
		k, v, ok := strings.Cut(line, ":")
		if !ok || (k != "VmRSS" && k != "VmHWM") {
			continue
		}
		f := strings.Fields(v)
		if len(f) == 0 {
			continue
		}
		n, _ := strconv.ParseInt(f[0], 10, 64)
		if k == "VmRSS" {
			rss = n * 1024
		} else {
			hwm = n * 1024
		}
	}
	return rss, hwm
}

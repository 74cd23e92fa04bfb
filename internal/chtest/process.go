package chtest

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/hunt-runner/hunt-runner/internal/chlocal/ctl"
)

// process is a running chlocal.
type process struct {
	cmd    *exec.Cmd
	addr   string
	stderr *syncWriter
	exited chan struct{}
}

// spawn runs fork/exec on one OS thread that never exits: Pdeathsig fires
// when the thread that started the child dies, not the process, so starting
// from an arbitrary goroutine could kill chlocal early.
var spawn = sync.OnceValue(func() chan func() {
	ch := make(chan func())
	go func() {
		lockThread()
		for f := range ch {
			f()
		}
	}()
	return ch
})

func startProcess(bin, listen, dataPath string) (*process, error) {
	args := []string{"-listen", listen}
	if dataPath != "" {
		args = append(args, "-path", dataPath)
	}
	cmd := exec.Command(bin, args...)
	cmd.Env = os.Environ()
	cmd.SysProcAttr = deathSignal()
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		return nil, err
	}
	p := &process{cmd: cmd, stderr: &syncWriter{}, exited: make(chan struct{})}
	cmd.Stderr = p.stderr
	errc := make(chan error, 1)
	spawn() <- func() { errc <- cmd.Start() }
	if err := <-errc; err != nil {
		return nil, fmt.Errorf("start chlocal: %w", err)
	}
	go func() {
		_ = cmd.Wait()
		close(p.exited)
	}()
	type result struct {
		addr string
		err  error
	}
	rc := make(chan result, 1)
	go func() {
		addr, err := readListening(stdout)
		rc <- result{addr, err}
		_, _ = io.Copy(io.Discard, stdout)
	}()
	select {
	case r := <-rc:
		if r.err != nil {
			p.kill()
			return nil, fmt.Errorf("%w; stderr: %s", r.err, p.stderrText())
		}
		p.addr = r.addr
	case <-time.After(60 * time.Second):
		p.kill()
		return nil, fmt.Errorf("chlocal did not start within 60s; stderr: %s", p.stderrText())
	}
	if err := waitReady(p.addr, 30*time.Second); err != nil {
		p.kill()
		return nil, err
	}
	return p, nil
}

func (p *process) stderrText() string { return p.stderr.String() }

// stop ends chlocal with SIGTERM, then SIGKILL after a grace period.
func (p *process) stop() error {
	select {
	case <-p.exited:
		return nil
	default:
	}
	_ = p.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-p.exited:
		return nil
	case <-time.After(15 * time.Second):
	}
	p.kill()
	return errors.New("chlocal ignored SIGTERM for 15s and was killed")
}

func (p *process) kill() {
	_ = p.cmd.Process.Kill()
	<-p.exited
}

// syncWriter collects a child's stderr for error messages.
type syncWriter struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncWriter) Write(b []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(b)
}

func (s *syncWriter) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

// Server is a private chlocal process, for tests that stop and restart
// ClickHouse (outages). It is stopped when the test ends.
type Server struct {
	// URL is http://127.0.0.1:PORT; it stays the same across Stop/Start.
	URL string
	// Addr is 127.0.0.1:PORT.
	Addr string

	t      testing.TB
	bin    string
	data   string
	mu     sync.Mutex
	proc   *process
	faults *ctl.FaultSet // the rules last set, put back after a restart
}

// Start runs a private chlocal process with its own data directory. It
// skips (or fails under CI=true) when CHDB_LIB_PATH is not set.
func Start(t testing.TB) *Server {
	t.Helper()
	LibPath(t)
	s := &Server{t: t, bin: Binary(t), data: t.TempDir()}
	p, err := startProcess(s.bin, "127.0.0.1:0", s.data)
	if err != nil {
		t.Fatalf("chtest: %v", err)
	}
	s.proc, s.Addr, s.URL = p, p.addr, "http://"+p.addr
	t.Cleanup(s.Stop)
	return s
}

// Stop ends the process; requests fail until Start. Stopping twice is a no-op.
func (s *Server) Stop() {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.proc == nil {
		return
	}
	if err := s.proc.stop(); err != nil {
		s.t.Logf("chtest: %v", err)
	}
	s.proc = nil
}

// Start restarts a stopped server on the same port with the same data.
func (s *Server) Start() {
	s.t.Helper()
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.proc != nil {
		return
	}
	var err error
	for range 50 { // the port may linger briefly after the old process
		var p *process
		if p, err = startProcess(s.bin, s.Addr, s.data); err == nil {
			s.proc = p
			if err := s.reapplyFaults(); err != nil {
				s.t.Fatalf("chtest: restart chlocal on %s: %v", s.Addr, err)
			}
			return
		}
		time.Sleep(100 * time.Millisecond)
	}
	s.t.Fatalf("chtest: restart chlocal on %s: %v", s.Addr, err)
}

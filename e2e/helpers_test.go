package e2e

import (
	"context"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"
)

var build struct {
	once sync.Once
	path string
	err  error
	dir  string
}

// binary builds cmd/hunt-runner once per test binary.
func binary(t *testing.T) string {
	t.Helper()
	build.once.Do(func() {
		build.dir, build.err = os.MkdirTemp("", "hunt-runner-e2e-")
		if build.err != nil {
			return
		}
		build.path = filepath.Join(build.dir, "hunt-runner")
		cmd := exec.Command("go", "build", "-o", build.path, "../cmd/hunt-runner")
		cmd.Env = append(os.Environ(), "CGO_ENABLED=0")
		if out, err := cmd.CombinedOutput(); err != nil {
			build.err = fmt.Errorf("go build: %v\n%s", err, out)
		}
	})
	if build.err != nil {
		t.Fatal(build.err)
	}
	return build.path
}

func freePort(t *testing.T) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	return ln.Addr().String()
}

// runnerProc is one `hunt-runner run` process.
type runnerProc struct {
	t      *testing.T
	name   string
	listen string
	args   []string
	logDir string
	cmd    *exec.Cmd
	done   chan struct{}
	starts int
}

func newRunner(t *testing.T, name string, args []string, logDir string) *runnerProc {
	p := &runnerProc{t: t, name: name, listen: freePort(t), args: args, logDir: logDir}
	p.start()
	t.Cleanup(func() {
		if p.running() {
			_ = p.cmd.Process.Kill()
			<-p.done
		}
	})
	return p
}

func (p *runnerProc) start() {
	p.t.Helper()
	p.starts++
	log, err := os.Create(filepath.Join(p.logDir, fmt.Sprintf("%s.%d.log", p.name, p.starts)))
	if err != nil {
		p.t.Fatal(err)
	}
	args := append([]string{"--log-level", "debug", "run", "--owner", p.name, "--listen", p.listen}, p.args...)
	p.cmd = exec.Command(binary(p.t), args...)
	p.cmd.Stdout, p.cmd.Stderr = log, log
	p.cmd.Env = append(os.Environ(), "HUNT_RUNNER_LOG_FORMAT=text")
	if err := p.cmd.Start(); err != nil {
		p.t.Fatal(err)
	}
	p.done = make(chan struct{})
	go func() { _ = p.cmd.Wait(); log.Close(); close(p.done) }()
}

func (p *runnerProc) running() bool {
	select {
	case <-p.done:
		return false
	default:
		return true
	}
}

// kill sends SIGKILL and waits for the process to be gone.
func (p *runnerProc) kill() {
	_ = p.cmd.Process.Signal(syscall.SIGKILL)
	<-p.done
}

// term sends SIGTERM and returns the exit code and how long the process took to exit.
func (p *runnerProc) term(limit time.Duration) (int, time.Duration) {
	p.t.Helper()
	start := time.Now()
	_ = p.cmd.Process.Signal(syscall.SIGTERM) // a second SIGTERM is harmless: the signal is handled once
	select {
	case <-p.done:
	case <-time.After(limit):
		p.t.Fatalf("%s did not exit within %v of SIGTERM", p.name, limit)
	}
	return p.cmd.ProcessState.ExitCode(), time.Since(start)
}

func (p *runnerProc) get(path string) (int, string) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	req, _ := http.NewRequestWithContext(ctx, "GET", "http://"+p.listen+path, nil)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return 0, err.Error()
	}
	defer resp.Body.Close()
	var b strings.Builder
	buf := make([]byte, 64<<10)
	for {
		n, err := resp.Body.Read(buf)
		b.Write(buf[:n])
		if err != nil {
			break
		}
	}
	return resp.StatusCode, b.String()
}

func (p *runnerProc) ready() bool {
	code, _ := p.get("/readyz")
	return code == http.StatusOK
}

// metric returns the value of an unlabelled metric line, or -1.
func (p *runnerProc) metric(name string) float64 {
	_, body := p.get("/metrics")
	for _, line := range strings.Split(body, "\n") {
		if v, ok := strings.CutPrefix(line, name+" "); ok {
			var f float64
			if _, err := fmt.Sscan(v, &f); err == nil {
				return f
			}
		}
	}
	return -1
}

func (p *runnerProc) logTail() string {
	var b strings.Builder
	for i := 1; i <= p.starts; i++ {
		data, _ := os.ReadFile(filepath.Join(p.logDir, fmt.Sprintf("%s.%d.log", p.name, i)))
		lines := strings.Split(strings.TrimSpace(string(data)), "\n")
		if len(lines) > 15 {
			lines = lines[len(lines)-15:]
		}
		fmt.Fprintf(&b, "--- %s start %d\n%s\n", p.name, i, strings.Join(lines, "\n"))
	}
	return b.String()
}

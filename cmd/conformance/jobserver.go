package main

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"syscall"
	"time"
)

// jobServer is a job server this command started.
type jobServer struct {
	cmd      *exec.Cmd
	endpoint string
	log      string
	done     chan struct{}
}

const prismPackage = "github.com/apache/beam/sdks/v2/go/cmd/prism"

// endpointRE matches the line ksrunner's job server prints once it listens.
var endpointRE = regexp.MustCompile(`job endpoint: (\S+:\d+)`)

// startJobServer builds and starts `ksrunner jobserver --job_port=0` (reading its endpoint
// from the line "job endpoint: HOST:PORT" on stdout) or, with prism, Beam's Prism on a free
// loopback port.
func startJobServer(ctx context.Context, root string, prism bool, logdir string, timeout time.Duration, stderr io.Writer) (*jobServer, error) {
	t0 := time.Now()
	pkg, name := "./cmd/ksrunner", "ksrunner"
	if prism {
		pkg, name = prismPackage, "prism"
	} else if _, err := os.Stat(filepath.Join(root, "cmd", "ksrunner")); err != nil {
		return nil, fmt.Errorf("no ./cmd/ksrunner in %s to start a job server from (give --endpoint or --prism)", root)
	}
	bin := filepath.Join(logdir, name)
	bctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	if out, err := goCmd(bctx, root, "build", "-o", bin, pkg); err != nil {
		return nil, fmt.Errorf("go build %s: %v\n%s", pkg, err, out)
	}
	var args []string
	port := 0
	if prism {
		p, err := freePort()
		if err != nil {
			return nil, err
		}
		port = p
		args = []string{"--job_port=" + strconv.Itoa(port), "--serve_http=false", "--log_level=warn"}
	} else {
		args = []string{"jobserver", "--job_port=0", "--expansion_port=0", "--status_port=0"}
	}
	js := &jobServer{log: filepath.Join(logdir, name+".log"), done: make(chan struct{})}
	logf, err := os.Create(js.log)
	if err != nil {
		return nil, err
	}
	js.cmd = exec.Command(bin, args...)
	js.cmd.Dir = root
	js.cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	js.cmd.Stderr = logf
	stdout, err := js.cmd.StdoutPipe()
	if err != nil {
		return nil, err
	}
	if err := js.cmd.Start(); err != nil {
		return nil, fmt.Errorf("starting %s: %v", bin, err)
	}
	found := make(chan string, 1)
	go func() {
		defer logf.Close()
		sc := bufio.NewScanner(stdout)
		for sc.Scan() {
			fmt.Fprintln(logf, sc.Text())
			if m := endpointRE.FindStringSubmatch(sc.Text()); m != nil {
				select {
				case found <- m[1]:
				default:
				}
			}
		}
	}()
	go func() { js.cmd.Wait(); close(js.done) }()

	if prism {
		go func() {
			addr := net.JoinHostPort("127.0.0.1", strconv.Itoa(port))
			for {
				if c, err := net.DialTimeout("tcp", addr, time.Second); err == nil {
					c.Close()
					found <- addr
					return
				}
				select {
				case <-js.done:
					return
				case <-time.After(100 * time.Millisecond):
				}
			}
		}()
	}
	select {
	case js.endpoint = <-found:
		fmt.Fprintf(stderr, "conformance: started %s (pid %d) at %s in %.1fs, log %s\n", name, js.cmd.Process.Pid, js.endpoint, time.Since(t0).Seconds(), js.log)
		return js, nil
	case <-js.done:
		return nil, fmt.Errorf("%s exited before printing its endpoint (%v); log: %s", name, js.cmd.ProcessState, js.log)
	case <-bctx.Done():
		js.stop(stderr)
		return nil, fmt.Errorf("%s did not print \"job endpoint: HOST:PORT\" within %v; log: %s", name, timeout, js.log)
	}
}

func (js *jobServer) stop(stderr io.Writer) {
	select {
	case <-js.done:
		return
	default:
	}
	pid := js.cmd.Process.Pid
	syscall.Kill(-pid, syscall.SIGTERM)
	select {
	case <-js.done:
	case <-time.After(10 * time.Second):
		fmt.Fprintf(stderr, "conformance: job server pid %d ignored SIGTERM for 10s: SIGKILL\n", pid)
		syscall.Kill(-pid, syscall.SIGKILL)
		<-js.done
	}
}

func freePort() (int, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, err
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port, nil
}

package testcluster

import (
	"io"
	"net"
	"sync"
)

// Forwarder exposes a service that listens on this host's loopback to the
// cluster's pods, on the bridge address. A Temporal dev server must stay on
// loopback: its internal services advertise loopback addresses to each
// other, so one bound to another address fails its own long polls.
type Forwarder struct {
	listener net.Listener
	target   string
	wg       sync.WaitGroup
}

// Forward listens on a free port of GatewayIP and copies each connection to
// target. Close it when done.
func Forward(target string) (*Forwarder, error) {
	l, err := net.Listen("tcp", net.JoinHostPort(GatewayIP, "0"))
	if err != nil {
		return nil, err
	}
	f := &Forwarder{listener: l, target: target}
	f.wg.Add(1)
	go f.serve()
	return f, nil
}

// Address is where pods reach the target.
func (f *Forwarder) Address() string { return f.listener.Addr().String() }

// Close stops accepting connections; open ones end with their peers.
func (f *Forwarder) Close() error {
	err := f.listener.Close()
	f.wg.Wait()
	return err
}

func (f *Forwarder) serve() {
	defer f.wg.Done()
	for {
		in, err := f.listener.Accept()
		if err != nil {
			return
		}
		go func() {
			out, err := net.Dial("tcp", f.target)
			if err != nil {
				_ = in.Close()
				return
			}
			go func() { _, _ = io.Copy(out, in); _ = out.Close() }()
			_, _ = io.Copy(in, out)
			_ = in.Close()
		}()
	}
}

package dbtest

import (
	"context"
	"net"
	"strconv"
	"sync"
	"testing"

	"github.com/jackc/pgx/v5/pgxpool"
)

// Proxy is a TCP proxy in front of a PostgreSQL server that can freeze: while
// frozen it holds every byte in both directions and keeps every socket open,
// as a hung network or a stopped server does. New connections are accepted
// but get nothing either.
type Proxy struct {
	ln     net.Listener
	target func(ctx context.Context) (net.Conn, error)

	mu     sync.Mutex
	frozen bool
	thawed chan struct{} // closed when not frozen
	conns  []net.Conn
}

// Freeze stops every byte until Thaw.
func (p *Proxy) Freeze() {
	p.mu.Lock()
	defer p.mu.Unlock()
	if !p.frozen {
		p.frozen, p.thawed = true, make(chan struct{})
	}
}

// Thaw lets the held bytes through again.
func (p *Proxy) Thaw() {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.frozen {
		p.frozen = false
		close(p.thawed)
	}
}

func (p *Proxy) gate() <-chan struct{} {
	p.mu.Lock()
	defer p.mu.Unlock()
	if !p.frozen {
		return nil
	}
	return p.thawed
}

// ProxiedPool returns a pool on the database of url whose connections go
// through a [Proxy], closed when t ends.
func ProxiedPool(t testing.TB, url string) (*pgxpool.Pool, *Proxy) {
	t.Helper()
	cfg, err := pgxpool.ParseConfig(url)
	if err != nil {
		t.Fatalf("dbtest: %v", err)
	}
	host, port := cfg.ConnConfig.Host, cfg.ConnConfig.Port
	network, addr := "tcp", net.JoinHostPort(host, strconv.Itoa(int(port)))
	if len(host) > 0 && host[0] == '/' {
		network, addr = "unix", host+"/.s.PGSQL."+strconv.Itoa(int(port))
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatalf("dbtest: %v", err)
	}
	p := &Proxy{ln: ln, target: func(ctx context.Context) (net.Conn, error) {
		var d net.Dialer
		return d.DialContext(ctx, network, addr)
	}}
	go p.serve()
	cfg.ConnConfig.Host = "127.0.0.1"
	cfg.ConnConfig.Port = uint16(ln.Addr().(*net.TCPAddr).Port)
	cfg.ConnConfig.Fallbacks = nil
	cfg.ConnConfig.TLSConfig = nil
	pool, err := pgxpool.NewWithConfig(context.Background(), cfg)
	if err != nil {
		t.Fatalf("dbtest: %v", err)
	}
	t.Cleanup(func() {
		p.Thaw()
		pool.Close()
		_ = ln.Close()
		p.mu.Lock()
		for _, c := range p.conns {
			_ = c.Close()
		}
		p.mu.Unlock()
	})
	return pool, p
}

func (p *Proxy) serve() {
	for {
		c, err := p.ln.Accept()
		if err != nil {
			return
		}
		go func() {
			if g := p.gate(); g != nil {
				<-g
			}
			s, err := p.target(context.Background())
			if err != nil {
				_ = c.Close()
				return
			}
			p.mu.Lock()
			p.conns = append(p.conns, c, s)
			p.mu.Unlock()
			go p.pipe(s, c)
			go p.pipe(c, s)
		}()
	}
}

// pipe copies from src to dst, holding each chunk while the proxy is frozen.
func (p *Proxy) pipe(dst, src net.Conn) {
	defer dst.Close()
	defer src.Close()
	buf := make([]byte, 32<<10)
	for {
		n, err := src.Read(buf)
		if n > 0 {
			if g := p.gate(); g != nil {
				<-g
			}
			if _, werr := dst.Write(buf[:n]); werr != nil {
				return
			}
		}
		if err != nil {
			return
		}
	}
}

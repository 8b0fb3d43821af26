package testenv

import (
	"context"
	"net"
)

// FreeAddr returns a loopback address whose port was free a moment ago, for a server a test
// is about to start (health probes, metrics). It panics if no port can be had.
func FreeAddr() string {
	l, err := (&net.ListenConfig{}).Listen(context.Background(), "tcp", "127.0.0.1:0")
	if err != nil {
		panic(err)
	}
	defer l.Close()
	return l.Addr().String()
}

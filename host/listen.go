package host

import (
	"net"
	"strings"
)

type netListener = net.Listener

// listenLoopback binds wildcard addresses to loopback: the embedded broker is
// for this machine only.
func listenLoopback(network, address string) (net.Listener, error) {
	if strings.HasPrefix(address, ":") {
		address = "127.0.0.1" + address
	}
	return net.Listen(network, address)
}

package render

import (
	"fmt"
	"net"
	"net/netip"
	"regexp"
	"strconv"
	"strings"
)

// engineAddressPattern is the API's pattern for spec.engine.address.
var engineAddressPattern = regexp.MustCompile(`^([^\s/:\[\]@]+|\[[0-9A-Fa-f:.]+\]):[0-9]{1,5}$`)

// CheckEngineAddress applies the API's rules for spec.engine.address to an
// address from elsewhere, such as the operator's --default-engine-address:
// host:port with a port from 1 to 65535.
func CheckEngineAddress(address string) error {
	if !engineAddressPattern.MatchString(address) {
		return fmt.Errorf("engine address %q must be host:port, with an IPv6 address in brackets and no scheme or path", address)
	}
	port, _ := strconv.Atoi(address[strings.LastIndexByte(address, ':')+1:])
	if port < 1 || port > 65535 {
		return fmt.Errorf("engine address %q must end in a port from 1 to 65535", address)
	}
	return nil
}

// CanonicalEngineAddress spells an engine address the one way the addresses a
// credential's Secret names are compared with the address an Agent sends it
// to: the host name in lower case without a trailing dot, an IP address in
// its canonical form (an IPv4-mapped IPv6 address as IPv4), and the port as
// a decimal number without leading zeros. So TEMPORAL.example.com:7233,
// temporal.example.com.:7233 and temporal.example.com:07233 are one
// address. Flow type claims never compare addresses: they are keyed by the
// engine's own ID of its namespace.
//
// An address without a port is not completed: the API refuses one, and the
// worker's gRPC client would dial port 443, not 7233.
func CanonicalEngineAddress(address string) string {
	host, port, err := net.SplitHostPort(address)
	if err != nil {
		return strings.ToLower(address)
	}
	if ip, err := netip.ParseAddr(host); err == nil {
		host = ip.Unmap().String()
	} else {
		host = strings.TrimSuffix(strings.ToLower(host), ".")
	}
	if n, err := strconv.ParseUint(port, 10, 16); err == nil {
		port = strconv.FormatUint(n, 10)
	}
	return net.JoinHostPort(host, port)
}

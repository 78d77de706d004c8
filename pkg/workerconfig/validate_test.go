package workerconfig

import (
	"testing"
)

func TestLoopbackDebugAddressesAreAccepted(t *testing.T) {
	for _, address := range []string{"127.0.0.1:8081", "[::1]:8081", "localhost:8081", "127.0.0.1:0"} {
		cfg := validConfig()
		cfg.DebugAddress = address
		if err := cfg.Validate(); err != nil {
			t.Errorf("debugAddress %q: %v", address, err)
		}
	}
}

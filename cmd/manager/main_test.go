package main

import (
	"strings"
	"testing"
)

func TestDefaultEngineRefusesAnAddressTheAPIWould(t *testing.T) {
	for address, wantErr := range map[string]string{
		"temporal-frontend.temporal.svc:7233": "",
		"temporal-frontend.temporal.svc":      "--default-engine-address: engine address \"temporal-frontend.temporal.svc\" must be host:port",
		"temporal:0":                          "port from 1 to 65535",
	} {
		engine, err := defaultEngine(address, "default", false, "", "", "")
		switch {
		case wantErr == "" && (err != nil || engine.Address != address):
			t.Errorf("defaultEngine(%q) = %+v, %v", address, engine, err)
		case wantErr != "" && (err == nil || !strings.Contains(err.Error(), wantErr)):
			t.Errorf("defaultEngine(%q) = %v, want an error containing %q", address, err, wantErr)
		}
	}
}

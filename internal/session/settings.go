package session

import (
	"bytes"
	"encoding/json"
	"fmt"

	"github.com/stepwise-run/stepwise/internal/contract"
)

// InvalidStartSettingsReason starts the reason of a session that failed at
// start because its settings were refused.
const InvalidStartSettingsReason = "invalid start session settings"

// normalizeSettings checks settings as the session stores them: one JSON
// object of at most contract.MaxSessionSettingsBytes plus the tolerance, in
// compact form. Null and anything but an object are refused.
func normalizeSettings(raw json.RawMessage) (json.RawMessage, error) {
	trimmed := bytes.TrimSpace(raw)
	if len(trimmed) == 0 || bytes.Equal(trimmed, []byte("null")) {
		return nil, fmt.Errorf("session settings are missing; send {} to clear them")
	}
	if trimmed[0] != '{' {
		return nil, fmt.Errorf("session settings must be a JSON object")
	}
	if _, err := contract.DecodeSessionSettings(trimmed); err != nil {
		return nil, err
	}
	var compact bytes.Buffer
	if err := json.Compact(&compact, trimmed); err != nil {
		return nil, fmt.Errorf("session settings are not JSON: %w", err)
	}
	if limit := contract.MaxSessionSettingsBytes + contract.SessionSettingsSizeTolerance; compact.Len() > limit {
		return nil, fmt.Errorf("session settings are %d bytes of JSON, more than the limit of %d", compact.Len(), contract.MaxSessionSettingsBytes)
	}
	if compact.String() == "{}" {
		return nil, nil
	}
	return compact.Bytes(), nil
}

// CheckStartSettings checks the settings a session starts with; none is
// fine.
func CheckStartSettings(raw json.RawMessage) error {
	if len(bytes.TrimSpace(raw)) == 0 {
		return nil
	}
	if _, err := normalizeSettings(raw); err != nil {
		return fmt.Errorf("%s: %w", InvalidStartSettingsReason, err)
	}
	return nil
}

// CheckSettingsUpdate is update_session_settings' validator.
func (s *State) CheckSettingsUpdate(raw json.RawMessage) error {
	if !s.Started {
		return reject("the session has not started")
	}
	if _, err := normalizeSettings(raw); err != nil {
		return reject("%v", err)
	}
	return nil
}

// UpdateSettings is update_session_settings: the settings replace the
// stored ones as a whole, and {} clears them. The next turn starts with
// them; a running turn keeps the settings it started with.
func (s *State) UpdateSettings(raw json.RawMessage) error {
	if err := s.CheckSettingsUpdate(raw); err != nil {
		return err
	}
	s.Settings, _ = normalizeSettings(raw)
	return nil
}

package objmeta

import "testing"

func TestHasAll(t *testing.T) {
	for _, tc := range []struct {
		name       string
		have, want map[string]string
		ok         bool
	}{
		{"nothing wanted", nil, nil, true},
		{"nothing wanted, some present", map[string]string{"a": "1"}, nil, true},
		{"all present, others too", map[string]string{"a": "1", "b": "2"}, map[string]string{"a": "1"}, true},
		{"missing", map[string]string{"b": "2"}, map[string]string{"a": "1"}, false},
		{"other value", map[string]string{"a": "2"}, map[string]string{"a": "1"}, false},
		{"empty value wanted, key absent", nil, map[string]string{"a": ""}, false},
		{"empty value wanted and present", map[string]string{"a": ""}, map[string]string{"a": ""}, true},
	} {
		if got := HasAll(tc.have, tc.want); got != tc.ok {
			t.Errorf("%s: HasAll(%v, %v) = %v, want %v", tc.name, tc.have, tc.want, got, tc.ok)
		}
	}
}

package v1alpha1_test

import (
	"testing"

	v1alpha1 "github.com/loraplane/loraplane/shared/api/model/v1alpha1"
)

func TestEnginePort(t *testing.T) {
	for name, tc := range map[string]struct {
		labels  map[string]string
		want    int32
		wantErr string
	}{
		"absent":       {labels: map[string]string{"other": "1"}, want: 8000},
		"nil labels":   {want: 8000},
		"valid":        {labels: map[string]string{v1alpha1.ModelPortLabel: "9000"}, want: 9000},
		"bounds":       {labels: map[string]string{v1alpha1.ModelPortLabel: "65535"}, want: 65535},
		"zero":         {labels: map[string]string{v1alpha1.ModelPortLabel: "0"}, want: 8000, wantErr: `label model.aibrix.ai/port value "0" is out of range 1-65535`},
		"too large":    {labels: map[string]string{v1alpha1.ModelPortLabel: "65536"}, want: 8000, wantErr: `label model.aibrix.ai/port value "65536" is out of range 1-65535`},
		"not a number": {labels: map[string]string{v1alpha1.ModelPortLabel: "http"}, want: 8000, wantErr: `label model.aibrix.ai/port value "http" is not a decimal number`},
		"empty":        {labels: map[string]string{v1alpha1.ModelPortLabel: ""}, want: 8000, wantErr: `label model.aibrix.ai/port value "" is not a decimal number`},
		"sign":         {labels: map[string]string{v1alpha1.ModelPortLabel: "+80"}, want: 80},
	} {
		t.Run(name, func(t *testing.T) {
			got, err := v1alpha1.EnginePort(tc.labels)
			gotErr := ""
			if err != nil {
				gotErr = err.Error()
			}
			if got != tc.want || gotErr != tc.wantErr {
				t.Errorf("EnginePort(%v) = %d, %q; want %d, %q", tc.labels, got, gotErr, tc.want, tc.wantErr)
			}
		})
	}
}

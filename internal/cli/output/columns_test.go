package output_test

import (
	"bytes"
	"testing"

	"github.com/kubectl-offload/kubectl-offload/internal/cli/output"
)

func TestTable(t *testing.T) {
	for _, tc := range []struct {
		name  string
		table output.Columns
		want  string
	}{
		{
			name: "like kubectl get",
			table: output.Columns{Header: []string{"ID", "STATUS", "USED BY"}, Rows: [][]string{
				{"abc123", "Valid", "-"},
				{"d", "Expired", "consumer-1"},
			}},
			want: "ID       STATUS    USED BY\n" +
				"abc123   Valid     -\n" +
				"d        Expired   consumer-1\n",
		},
		{
			name: "fields, one space apart, empty last cells",
			table: output.Columns{Gap: 1, Rows: [][]string{
				{"Client Version:", "v1.2.3"},
				{"Go:", ""},
			}},
			want: "Client Version: v1.2.3\n" +
				"Go:\n",
		},
		{
			name: "wide and coloured cells keep the columns aligned",
			table: output.Columns{Gap: 2, Header: []string{"NAME", "X"}, HeaderStyle: func(s string) string { return "\x1b[1m" + s + "\x1b[0m" },
				Rows: [][]string{{"名前", "1"}, {"\x1b[32mok\x1b[0m", "2"}}},
			want: "\x1b[1mNAME\x1b[0m  \x1b[1mX\x1b[0m\n" +
				"名前  1\n" +
				"\x1b[32mok\x1b[0m    2\n",
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var b bytes.Buffer
			if err := tc.table.Write(&b); err != nil {
				t.Fatal(err)
			}
			if b.String() != tc.want {
				t.Errorf("got\n%q\nwant\n%q", b.String(), tc.want)
			}
		})
	}
}

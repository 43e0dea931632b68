package charts

// Render renders the embedded chart with vals, as `helm template` would, and
// returns its objects by "Kind/name", for the external tests of this package.
var Render = render

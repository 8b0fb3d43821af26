package controller

// KeyKind says what a Key names.
type KeyKind uint8

const (
	// KeyModel keys the HTTPRoute of one model name.
	KeyModel KeyKind = iota + 1
	// KeyGrants keys the ReferenceGrants of one source namespace.
	KeyGrants
)

// Key is the workqueue item of the router controller. It is a struct rather than a
// reconcile.Request with an encoded name: model names may contain '/', ':' and anything
// else a header value may hold, and a struct needs no escaping to stay unambiguous.
type Key struct {
	Kind KeyKind
	// Name is the model name (KeyModel) or the namespace (KeyGrants).
	Name string
}

// ModelKey keys the route of a model.
func ModelKey(model string) Key { return Key{Kind: KeyModel, Name: model} }

// GrantsKey keys the ReferenceGrants of a namespace.
func GrantsKey(namespace string) Key { return Key{Kind: KeyGrants, Name: namespace} }

// String renders the key for logs: "model:<name>" or "grants:<namespace>". The prefix is
// fixed, so the rendering is unambiguous whatever the name holds.
func (k Key) String() string {
	switch k.Kind {
	case KeyModel:
		return "model:" + k.Name
	case KeyGrants:
		return "grants:" + k.Name
	default:
		return "unknown:" + k.Name
	}
}

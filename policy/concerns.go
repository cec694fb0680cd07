package policy

// Concerns reports whether r can decide some request of the user named
// user that is privileged or not as given, whatever its command: the
// rule's scope admits privileged, and its user= qualifier, if any,
// matches user. `rootgate sudo -l` lists the rules that concern its
// requester, and no others, as a check request names no others.
func (r *Rule) Concerns(user string, privileged bool) bool {
	switch r.scope {
	case scopePrivileged:
		if !privileged {
			return false
		}
	case scopeUnprivileged:
		if privileged {
			return false
		}
	case scopeAny:
	default:
		return false
	}
	return r.user == "" || globMatch(r.user, user)
}

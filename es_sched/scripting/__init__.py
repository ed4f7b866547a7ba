"""Script engines behind ``es_sched.domain.scripts.ScriptEngine``: QuickJS for INLINE and SWITCH."""

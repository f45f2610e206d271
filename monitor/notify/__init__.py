"""Notification: the one path from a finding to an alert (`alerts`), an alert's life (`lifecycle`),
who hears of it (`routing`), what silences mute (`silences`), the outbox and its delivery, re-posts
to receivers that forget, and what a person does to an alert (`handling`). Each kind of receiver is
a module of `monitor.sinks`."""

"""The client core, apart from the server core: `ClientCore` (`_client`), the calls it waits on
(`_client_calls`), the processes it follows (`_client_tracks`) and the checks of the server's
frames (`_client_frames`). Its events are public in `execproto.client_events`.

It shares only the wire's vocabulary with the server core (`_errors`, `_paths`); nothing of the
server core imports it.
"""

"""The client's adapter parts: the websocket under it (`_wsclient`) and what it hands out
(`_client_process`). The public face is `execproto.adapters.client`; nothing of the server is
imported here.
"""

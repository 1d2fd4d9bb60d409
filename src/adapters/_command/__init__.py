"""The command line's parts beside `cli`: ``execproto exec`` (a client of `client`), log set-up,
and the user's mistakes told apart from bugs.
"""

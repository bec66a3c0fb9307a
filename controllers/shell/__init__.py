"""The controller's shell: the os-ken app, its OpenFlow messages, the JSON API (server,
handlers, client) and the process that runs them. Everything the controller decides is in
the pure modules one folder up (``controllers.fabric``, ``flowtable``, ``routing``,
``paths``, ``lb``, ``policies``); these only move it to switches and over HTTP.
"""

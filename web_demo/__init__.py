"""The browser voice demo: static files only (HTML, CSS, JavaScript modules).

A package so that the wheel ships the files as package data and the gateway
finds them with ``importlib.resources`` wherever it is installed.
"""

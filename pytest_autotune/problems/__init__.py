"""problems"""

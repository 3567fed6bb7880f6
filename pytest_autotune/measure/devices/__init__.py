"""measure/devices"""

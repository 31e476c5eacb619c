"""The rclpy node and message conversions: the only place that imports rclpy."""

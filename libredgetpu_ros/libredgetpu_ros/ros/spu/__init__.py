"""SPU lifecycle node (Femtosense): IOSpec inputs as stamped topics, outputs stamped by their sequence."""

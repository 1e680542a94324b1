;;; forj-mcp-servers.el --- The outside MCP servers the chat may use, and their state  -*- lexical-binding: t; -*-

;; Copyright (C) 2026 The forj authors

;; This program is free software; you can redistribute it and/or modify
;; it under the terms of the GNU General Public License as published by
;; the Free Software Foundation, either version 3 of the License, or
;; (at your option) any later version.

;; This program is distributed in the hope that it will be useful,
;; but WITHOUT ANY WARRANTY; without even the implied warranty of
;; MERCHANTABILITY or FITNESS FOR A PARTICULAR PURPOSE.  See the
;; GNU General Public License for more details.

;; You should have received a copy of the GNU General Public License
;; along with this program.  If not, see <https://www.gnu.org/licenses/>.

;;; Commentary:

;; `forj-mcp-servers' (in `forj-menu': "MCP servers") shows the outside
;; MCP servers named in your config file (`[mcp.servers.NAME]'): each
;; one's state (running, failed, disabled), its command or URL, why it
;; failed and what to do, and the tools the chat gets from it, named
;; mcp__NAME__TOOL.  The worker starts the servers and offers their
;; tools; a call to one is reviewed like any other call.  `g' asks the
;; worker again.

;;; Code:

(require 'subr-x)
(require 'forj-epc)
(require 'forj-worker)
(require 'forj-session)

(defvar-local forj-mcp-servers--root nil
  "The project root whose worker this buffer shows the servers of.")

(defvar forj-mcp-servers-mode-map
  (let ((map (make-sparse-keymap)))
    (define-key map "g" #'forj-mcp-servers-refresh)
    map)
  "Keys of the MCP servers buffer.")

(define-derived-mode forj-mcp-servers-mode special-mode "forj-mcp"
  "The outside MCP servers of a project's worker.
\\{forj-mcp-servers-mode-map}")

;;;###autoload
(defun forj-mcp-servers (&optional root)
  "Show the outside MCP servers of ROOT's worker: state, command or URL, tools.
ROOT defaults to the current chat's project, else the current directory's."
  (interactive)
  (let* ((root (file-name-as-directory
                (expand-file-name
                 (or root
                     (forj-session-current-root)
                     (forj-worker-project-root)))))
         (buffer (get-buffer-create "*forj-mcp-servers*")))
    (with-current-buffer buffer
      (forj-mcp-servers-mode)
      (setq forj-mcp-servers--root root))
    (pop-to-buffer buffer)
    (with-current-buffer buffer (forj-mcp-servers-refresh))
    buffer))

(defun forj-mcp-servers-refresh ()
  "Ask the worker for its MCP servers again and show them."
  (interactive)
  (unless forj-mcp-servers--root (user-error "Not in a forj MCP servers buffer"))
  (let ((buffer (current-buffer)))
    (forj-mcp-servers--draw "Asking the worker…\n")
    (forj-worker-ensure
     forj-mcp-servers--root
     (lambda (worker)
       (forj-epc-call (forj-worker-connection worker) "mcp_servers" nil
                      :success (lambda (reply) (forj-mcp-servers--show buffer reply))
                      :error (lambda (err) (forj-mcp-servers--failed buffer err))))
     (lambda (err) (forj-mcp-servers--failed buffer err)))))

(defun forj-mcp-servers--failed (buffer err)
  "Say in BUFFER that the worker could not answer: ERR."
  (when (buffer-live-p buffer)
    (with-current-buffer buffer
      (forj-mcp-servers--draw
       (format "The worker could not list its MCP servers: %s\n"
               (or (and (listp err) (plist-get err :message)) err))))))

(defun forj-mcp-servers--draw (text)
  "Replace the buffer's text with TEXT."
  (let ((inhibit-read-only t))
    (erase-buffer)
    (insert text)
    (goto-char (point-min))))

(defun forj-mcp-servers--show (buffer reply)
  "Draw the servers of the `mcp_servers' REPLY in BUFFER."
  (when (buffer-live-p buffer)
    (with-current-buffer buffer
      (forj-mcp-servers--draw (forj-mcp-servers--text (append (plist-get reply :servers) nil))))))

(defun forj-mcp-servers--text (servers)
  "Return the text showing SERVERS, a list of the worker's server plists."
  (if (null servers)
      (concat "No MCP server is configured.\n\n"
              "Name one in your own config file, e.g.\n\n"
              "  [mcp.servers.time]\n"
              "  command = [\"uvx\", \"mcp-server-time\"]\n\n"
              "then restart the worker (M-x forj-worker-restart).  "
              "A project's .forj/config.toml cannot add one.\n")
    (mapconcat
     (lambda (server)
       (let ((name (plist-get server :name))
             (tools (append (plist-get server :tools) nil))
             (err (plist-get server :error)))
         (concat
          (propertize (format "%s" name) 'face 'bold)
          (format "  %s  (%s: %s)\n"
                  (plist-get server :state) (plist-get server :transport)
                  (plist-get server :target))
          (if (stringp err) (format "  %s\n" err) "")
          (if tools
              (mapconcat (lambda (tool) (format "  mcp__%s__%s\n" name tool)) tools "")
            "")
          "\n")))
     servers "")))

(provide 'forj-mcp-servers)
;;; forj-mcp-servers.el ends here

;;; forj-menu.el --- One menu for everything a chat can do  -*- lexical-binding: t; -*-

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

;; `forj-menu' (`C-c C-m' or `C-c ?' in a chat, `?' in its history) is
;; a transient menu: send, stop, the tools mode, saved chats, the
;; worker, the settings.  An entry is shown only when it can act: the
;; chat's own entries in a chat, "stop" while something runs, "result"
;; while a call waits for one.  Entries for commands that other parts of
;; forj may define (retry, model and mode switching, permissions,
;; context, tasks, undo, rewind, the raw result at point) appear as soon
;; as their command exists; nothing in the menu stands for a command
;; that does not.

;;; Code:

(require 'transient)
(require 'forj)
(require 'forj-chat)
(require 'forj-session)

;;; When an entry shows

(defun forj-menu--in-chat-p ()
  "Non-nil in a chat buffer."
  (derived-mode-p 'forj-chat-mode))

(defun forj-menu--chat-idle-p ()
  "Non-nil in a chat that is neither receiving a reply nor running tools."
  (and (forj-menu--in-chat-p) (eq (forj-session-state forj-session) 'idle)))

(defun forj-menu--busy-p ()
  "Return non-nil while a reply streams in or a batch is running here."
  (if (forj-menu--in-chat-p)
      (not (eq (forj-session-state forj-session) 'idle))
    (and forj-tools-current-batch t)))

(defun forj-menu--call-waits-p ()
  "Non-nil when a call of this buffer waits for a result from the user."
  (and forj-tools-current-batch
       (forj-tools-manual-entries forj-tools-current-batch)
       t))

(defun forj-menu--recovery-waits-p ()
  "Non-nil when an unfinished batch waits in this chat for the user's word."
  (and (boundp 'forj-recover-pending) forj-recover-pending (commandp 'forj-recover) t))

;;; Commands of the menu's own

(defun forj-menu--root ()
  "The project root of the current buffer: the chat's, else its project's."
  (or (and (forj-menu--in-chat-p) (forj-session-root forj-session))
      forj-tools-root
      (forj-worker-project-root)))

(defun forj-menu-stop ()
  "Stop the reply or the tools of a chat, or elsewhere the running batch."
  (interactive)
  (if (forj-menu--in-chat-p) (forj-chat-stop) (forj-cancel)))

(defun forj-menu-status ()
  "Show the state of this project's worker and of its command sandbox."
  (interactive)
  (forj-status (forj-menu--root)))

(defun forj-menu-restart-worker ()
  "Restart this project's worker."
  (interactive)
  (forj-worker-restart (forj-menu--root)))

(defun forj-menu-worker-log ()
  "Show what this project's worker printed on its error output."
  (interactive)
  (forj-worker-log (forj-menu--root)))

(defun forj-menu-settings ()
  "Open forj's settings (the customization group `forj')."
  (interactive)
  (customize-group 'forj))

(defun forj-open-chat (file)
  "Open the saved chat FILE (by default one in `forj-chat-directory')."
  (interactive
   (list (read-file-name "Open chat: " (file-name-as-directory forj-chat-directory) nil t)))
  (find-file file))

(defun forj-menu-system-prompt ()
  "Show the system prompt this chat sends with its next request."
  (interactive)
  (unless (forj-menu--in-chat-p) (user-error "Not in a forj chat"))
  (let ((prompt (forj-session-system-prompt)))
    (with-current-buffer (get-buffer-create "*forj-system-prompt*")
      (let ((inhibit-read-only t))
        (erase-buffer)
        (insert prompt))
      (goto-char (point-min))
      (special-mode)
      (display-buffer (current-buffer)))))

;;; The menu

(defun forj-menu--tools-mode-description ()
  "The tools entry's description: the chat's tools mode."
  (format "Tools mode (now %s)" forj-chat-tools-mode))

(autoload 'forj-audit "forj-audit" "List the tool calls journaled for a project." t)
(autoload 'forj-mcp-servers "forj-mcp-servers" "Show the outside MCP servers of a project." t)

;;;###autoload (autoload 'forj-menu "forj-menu" nil t)
(transient-define-prefix forj-menu ()
  "Open the menu of everything forj can do from here.
Entries show when they can act: the chat's own entries in a chat,
stop while something runs."
  [["Conversation"
    ("s" "Send" forj-chat-send :if forj-menu--chat-idle-p)
    ("k" "Stop" forj-menu-stop :if forj-menu--busy-p)
    ("r" "Retry the last reply" forj-retry :if (lambda () (commandp 'forj-retry)))
    ("c" "Continue" forj-continue :if (lambda () (commandp 'forj-continue)))
    ("g" "Continue to the end of the turn" forj-continue-to-end
     :if (lambda () (commandp 'forj-continue-to-end)))
    ("L" "Tool batches per message" forj-set-iteration-limit :if forj-menu--in-chat-p)
    ("e" "Edit a message (fork)" forj-edit-message
     :if (lambda () (commandp 'forj-edit-message)))
    ("t" "Give a waiting call its result" forj-tool-result :if forj-menu--call-waits-p)
    ("!" "Resume or discard an unfinished batch" forj-recover :if forj-menu--recovery-waits-p)]
   ["Model and tools"
    ("m" "Model" forj-set-model :if (lambda () (commandp 'forj-set-model)))
    ("M" "Mode" forj-set-mode :if (lambda () (commandp 'forj-set-mode)))
    ("a" "Permissions" forj-permissions :if (lambda () (commandp 'forj-permissions)))
    ("T" forj-chat-set-tools-mode :description forj-menu--tools-mode-description
     :if forj-menu--in-chat-p)
    ("y" "System prompt" forj-menu-system-prompt :if forj-menu--in-chat-p)]
   ["Context and tasks"
    ("x" "Add context" forj-add-context :if (lambda () (commandp 'forj-add-context)))
    ("X" "Remove context" forj-context-remove
     :if (lambda () (and (forj-menu--in-chat-p) forj-context-items)))
    ("z" "Compact the conversation" forj-compact
     :if (lambda () (and (commandp 'forj-compact) (forj-menu--chat-idle-p))))
    ("j" "Tasks" forj-tasks :if (lambda () (commandp 'forj-tasks)))
    ("u" "Undo" forj-undo :if (lambda () (commandp 'forj-undo)))
    ("w" "Rewind" forj-rewind :if (lambda () (commandp 'forj-rewind)))]]
  [["Results"
    ("o" "Fold or unfold the result" forj-tools-toggle-fold)
    ("v" "Raw result at point" forj-show-raw-result
     :if (lambda () (commandp 'forj-show-raw-result)))]
   ["Chats"
    ("S" "Save" forj-save :if forj-menu--in-chat-p)
    ("O" "Open a saved chat" forj-open-chat)
    ("C" "Resume an earlier chat" forj-resume :if (lambda () (commandp 'forj-resume)))
    ("D" "Demo" forj-demo)]
   ["Worker and settings"
    ("i" "Status" forj-menu-status)
    ("A" "Audit: every tool call" forj-audit)
    ("p" "MCP servers and their tools" forj-mcp-servers)
    ("R" "Restart the worker" forj-menu-restart-worker)
    ("l" "Worker log" forj-menu-worker-log)
    ("," "Settings" forj-menu-settings)]])

(provide 'forj-menu)
;;; forj-menu.el ends here

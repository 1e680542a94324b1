;;; forj-provider-scripted.el --- A provider that replays a recorded session  -*- lexical-binding: t; -*-

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

;; The `scripted' family needs no key and no network: it replays the
;; replies of a session file, streaming each in small pieces on a timer
;; as a real provider would.  A newcomer sees the whole tool loop work
;; on the sample project (`make run' with no key), and the tests drive
;; the loop with it.
;;
;; The file is JSON:
;;
;;   {"description": "...",
;;    "replies": [{"text": "...", "calls": [{"id": ..., "name": ..., "args": {...}}]},
;;                ...]}
;;
;; The reply given is the one after those already in the conversation
;; (the number of assistant messages so far), so a saved chat reopened
;; goes on where it stopped.  "calls", if present, arrive as native
;; function calls.  Pieces are `forj-provider-scripted-chunk' characters
;; every `forj-provider-scripted-delay' seconds.

;;; Code:

(require 'cl-lib)
(require 'forj-provider)

(defcustom forj-provider-scripted-chunk 24
  "Characters per piece when the scripted provider streams a reply."
  :type 'natnum
  :group 'forj)

(defcustom forj-provider-scripted-delay 0.02
  "Seconds between pieces of a scripted reply."
  :type 'number
  :group 'forj)

(defconst forj-provider-scripted--directory
  (file-name-directory (directory-file-name (file-name-directory
                                             (or load-file-name buffer-file-name))))
  "The forj checkout: where relative script paths start.")

(defun forj-provider-scripted--load (provider)
  "The replies of PROVIDER's script, or signal an error saying what is wrong."
  (let ((file (expand-file-name (or (plist-get provider :script) "demo/session.json")
                                forj-provider-scripted--directory)))
    (unless (file-readable-p file)
      (error "The scripted provider's session %s cannot be read" file))
    (let ((json (condition-case err
                    (forj-provider-json (with-temp-buffer
                                          (insert-file-contents file)
                                          (buffer-string)))
                  (error (error "The session %s is not valid JSON: %s" file
                                (error-message-string err))))))
      (unless (vectorp (plist-get json :replies))
        (error "The session %s has no \"replies\" list" file))
      (plist-get json :replies))))

(defun forj-provider-scripted--start (provider _system messages _tools callbacks)
  "Replay the next reply of PROVIDER's script after MESSAGES through CALLBACKS.
Return a function that stops the replay."
  (let* ((replies (condition-case err (forj-provider-scripted--load provider)
                    (error (run-at-time 0 nil (plist-get callbacks :on-error)
                                        (error-message-string err))
                           nil)))
         (index (cl-count "assistant" messages :key (lambda (m) (plist-get m :role)) :test #'equal))
         (reply (and replies (< index (length replies)) (aref replies index)))
         (text (if reply
                   (or (plist-get reply :text) "")
                 "(The recorded session has no more replies.)"))
         (position 0)
         (timer nil))
    (when replies
      (setq timer
            (run-at-time
             forj-provider-scripted-delay forj-provider-scripted-delay
             (lambda ()
               (if (< position (length text))
                   (let ((end (min (length text) (+ position forj-provider-scripted-chunk))))
                     (funcall (plist-get callbacks :on-text) (substring text position end))
                     (setq position end))
                 (cancel-timer timer)
                 (let ((calls (plist-get reply :calls)))
                   (when (vectorp calls)
                     (cl-loop for call across calls
                              do (funcall (plist-get callbacks :on-call)
                                          (list :id (plist-get call :id) :name (plist-get call :name)
                                                :args (or (plist-get call :args) (make-hash-table)))))))
                 (funcall (plist-get callbacks :on-done)))))))
    (lambda () (when timer (cancel-timer timer)))))

(forj-provider-register-family 'scripted :start #'forj-provider-scripted--start)

(provide 'forj-provider-scripted)
;;; forj-provider-scripted.el ends here
